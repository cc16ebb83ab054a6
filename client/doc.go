// Package client is a small Go client for pgq (schema fanout): a Publisher
// for the transactional outbox and a Consumer loop that wakes up on LISTEN,
// falls back to polling, hands each message to a handler and acks or nacks it.
//
// Everything here is a thin wrapper around the SQL API of docs/design.md §2
// (fanout.publish, fanout.publish_batch, fanout.read, fanout.ack,
// fanout.nack, fanout.extend_lease, fanout.heartbeat); any language can do
// the same with plain SQL. Statements go through pgx's statement cache, so
// each one is prepared once per connection.
//
// # Publishing
//
// A Publisher runs on anything that executes SQL: a *pgxpool.Pool (each
// publish commits on its own) or a pgx.Tx (the message is published if, and
// only if, the caller's transaction commits — the transactional outbox):
//
//	pub := client.NewPublisher(pool)
//	id, err := pub.Publish(ctx, "orders.created", client.Message{Payload: []byte(`{"order":42}`)})
//
//	tx, _ := pool.Begin(ctx)
//	// ... business writes on tx ...
//	_, err = pub.WithTx(tx).Publish(ctx, "orders.created", msg)
//	err = tx.Commit(ctx)
//
// PublishBatch publishes many messages in one statement (one round trip, one
// NOTIFY) and returns their ids in input order.
//
// # Consuming
//
// A Consumer reads pages of up to Config.MaxMessages messages under one lease
// (fanout.read), calls the Handler for each message in order, then settles
// the page: messages whose handler returned nil are acked (in one
// fanout.ack call), each failed one is nacked (fanout.nack) with the
// handler's error text, so the group redelivers it later (server-side
// exponential backoff, or the delay of a RetryAfter error) until the topic's
// max_attempts moves it to the dead letters. When the next read follows at
// once (the page was full, or a notification came in meanwhile), the ack of
// a page that succeeded entirely travels in that read
// (fanout.read(..., ack => lease): one statement, one commit instead of
// two); Config.DisablePipelinedAck turns that off.
//
//	c, err := client.NewConsumer(pool, client.Config{Topic: "orders.created", Group: "billing"},
//	    func(ctx context.Context, m *client.Delivery) error {
//	        return bill(ctx, m.Payload)
//	    })
//	err = c.Run(ctx) // until ctx is cancelled
//
// A TxHandler (NewTxConsumer) instead runs each message in its own
// transaction and acks it in that same transaction: the business writes and
// the ack commit or roll back together, so a database side effect happens
// once even if the consumer crashes between the two.
//
// Wake-up: the consumer LISTENs on the topic's channel (fanout.topics.channel;
// one NOTIFY per publishing statement) on a dedicated connection, and reads
// again right away after a full page, on a notification, or every
// PollInterval at the latest (the fallback when notifications are lost, the
// listener connection is down, or the topic was created with notify => false,
// in which case the consumer does not LISTEN at all).
//
// Lease: while a page is handled a timer extends its lease by a lease
// whenever half a lease is left, also during one long handler; when the lease is lost the handler's
// context is cancelled (context.Cause wraps ErrLeaseLost) and the rest of
// the page is not handed out.
//
// Graceful stop: when the context passed to Run is cancelled, the consumer
// stops reading, finishes the page it holds (handlers keep running with a
// context that is not cancelled, bounded by Config.StopTimeout; after it no
// further handler is called), settles what succeeded with a context that
// outlives the cancellation, and Run returns nil. Acks, nacks and
// extensions that meet a connection error are retried on a fresh connection
// while the lease is valid.
//
// Delivery is at least once: a consumer that dies mid-page leaves its lease
// to expire, and the page's un-acked messages are delivered again (attempt
// grows). Handlers must be idempotent or use a TxHandler. docs/client.md
// lists exactly when a handled message is handled again;
// Config.OnAckFailed reports the handled messages whose ack did not commit.
//
// # The SQL API one call each
//
// Read, Ack, Nack, ExtendLease, Heartbeat, PartitionOf and SchemaVersion
// run one SQL call on any DB, for code with its own loop (Read with
// ReadOptions.Ack acks the previous page in the same statement).
//
// # Tracing
//
// OpenTelemetry tracing is off by default; Publisher.WithTracerProvider and
// Config.TracerProvider turn it on: the publish span's W3C trace context
// travels in the message's headers, and each handler call's span belongs
// to the publisher's trace.
package client
