package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
)

// Every parameter of publish and publish_batch reaches the server: a dedupe
// key returns the first message's id, a delay holds a message back, a
// priority hands a message out first, notify => false is accepted, a
// sequence on a sequence-ordered topic; and the one-call-each functions:
// Read (with max_bytes, and with ack => the previous lease in the same
// statement), ExtendLease, Nack (retry_in, error), Ack, Heartbeat,
// PartitionOf, SchemaVersion.
func TestPublishOptionsAndOneCallAPI(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "opts")
	pub := client.NewPublisher(b.Pool)
	msg := func(s string) client.Message { return client.Message{Payload: json.RawMessage(`{"m":"` + s + `"}`)} }

	m := msg("once")
	m.DedupeKey = "k1"
	first, err := pub.Publish(ctx, "opts", m, client.WithNotify(false))
	require.NoError(t, err)
	again, err := pub.Publish(ctx, "opts", m)
	require.NoError(t, err)
	require.Equal(t, first, again, "a repeated dedupe key returns the first message's id")
	_, err = pub.Publish(ctx, "opts", msg("later"), client.WithDelay(time.Hour))
	require.NoError(t, err)
	_, err = pub.Publish(ctx, "opts", msg("tomorrow"), client.WithDeliverAt(time.Now().Add(24*time.Hour)))
	require.NoError(t, err)
	d1, d2 := msg("b1"), msg("b2")
	d1.DedupeKey, d2.DedupeKey = "kb", "kb"
	batch, err := pub.PublishBatch(ctx, "opts", []client.Message{d1, d2}, client.WithPriority(9))
	require.NoError(t, err)
	require.Equal(t, batch[0], batch[1], "one dedupe key within a batch is one message")

	ds, err := client.Read(ctx, b.Pool, "opts", client.ReadOptions{Consumer: "me", MaxMessages: 10,
		Lease: time.Minute, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, ds, 2, "the delayed messages are held back")
	require.Equal(t, batch[0], ds[0].ID, "priority 9 comes first")
	require.Equal(t, first, ds[1].ID)
	lease := ds[0].LeaseID

	until, err := client.ExtendLease(ctx, b.Pool, lease, time.Hour)
	require.NoError(t, err)
	require.True(t, until.After(time.Now().Add(59*time.Minute)))
	n, err := client.Nack(ctx, b.Pool, lease, []int64{first}, 0, "try again")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// The nacked message comes again, and the read acks the previous
	// lease (batch[0]) in the same statement.
	ds, err = client.Read(ctx, b.Pool, "opts", client.ReadOptions{Consumer: "me", Ack: lease})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, first, ds[0].ID)
	require.Equal(t, 2, ds[0].Attempt)
	n, err = client.Ack(ctx, b.Pool, lease)
	require.NoError(t, err)
	require.Zero(t, n, "read(ack =>) already acked the first lease")
	n, err = client.Ack(ctx, b.Pool, ds[0].LeaseID, first)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = client.Read(ctx, b.Pool, "opts", client.ReadOptions{Ack: 12345})
	require.Equal(t, client.CodeLeaseNotFound, client.SQLState(err), "a failed ack fails the read: %v", err)

	status, err := client.Heartbeat(ctx, b.Pool, "opts", "", "me")
	require.NoError(t, err)
	require.Equal(t, "active", status)

	createTopic(t, ctx, b.Pool, "opts.seq", "semantics => 'pubsub'", "sequence_ordering => true")
	_, err = b.Pool.Exec(ctx, `SELECT fanout.subscribe('opts.seq', 'g')`)
	require.NoError(t, err)
	s := msg("s1")
	s.MessageGroup, s.Sequence = "order-7", 1
	_, err = pub.Publish(ctx, "opts.seq", s)
	require.NoError(t, err)
	s.Sequence = 2
	_, err = pub.PublishBatch(ctx, "opts.seq", []client.Message{s})
	require.NoError(t, err)
	_, err = pub.Publish(ctx, "opts.seq", s, client.WithPriority(3))
	require.Equal(t, client.CodeOrderingConflict, client.SQLState(err), "%v", err)

	createTopic(t, ctx, b.Pool, "opts.parts", "semantics => 'pubsub'", "partitions => 4")
	p, err := client.PartitionOf(ctx, b.Pool, "opts.parts", "customer-1")
	require.NoError(t, err)
	require.True(t, p >= 0 && p < 4, "partition %d", p)

	v, err := client.SchemaVersion(ctx, b.Pool)
	require.NoError(t, err)
	require.NotEmpty(t, v)
}

// CaptureRows pages through a statement capture's claim-check.
func TestCaptureRowsPages(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)
	createTopic(t, ctx, b.Pool, "cap.stmts")
	_, err := b.Pool.Exec(ctx, `CREATE TABLE cap_rows (id int PRIMARY KEY);
	    SELECT fanout.capture_table('cap_rows', 'cap.stmts', shape => 'statement', claim_check_rows => 0);
	    INSERT INTO cap_rows SELECT g FROM generate_series(1, 1200) g`)
	require.NoError(t, err)
	ds, err := client.Read(ctx, b.Pool, "cap.stmts", client.ReadOptions{Consumer: "me", MaxMessages: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	var ids []int
	after := int64(0)
	for {
		page, err := client.CaptureRows(ctx, b.Pool, "cap.stmts", ds[0].ID, "inserted", after, 500)
		require.NoError(t, err)
		for _, r := range page {
			var row struct{ ID int }
			require.NoError(t, json.Unmarshal(r.Image, &row))
			ids = append(ids, row.ID)
			after = r.RowNo
		}
		if len(page) < 500 {
			break
		}
	}
	require.Len(t, ids, 1200)
	require.Equal(t, 1200, ids[1199])
	_, err = client.CaptureRows(ctx, b.Pool, "cap.stmts", ds[0].ID, "both", 0, 10)
	require.ErrorContains(t, err, "PGQ03")
}
