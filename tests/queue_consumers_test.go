package tests

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// qLeaseOverlaps counts pairs of leases of a topic that hold the same message
// with overlapping [created_at, expires_at) intervals (docs/design.md §3.5), and
// messages delivered again after a lease had already settled them. Reads the
// lease history (b.keepLeaseHistory first).
func (b *bundle) qLeaseOverlaps(t *testing.T, topic string) (overlaps, afterSettle int64) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		WITH x AS (
		    SELECT l.lease_id, l.created_at, l.expires_at, m.id, m.id = ANY (l.settled) AS settled
		    FROM audit.lease_all l
		    JOIN fanout.consumer_group g ON g.group_id = l.group_id
		    JOIN fanout.topic t ON t.topic_id = g.topic_id
		    CROSS JOIN LATERAL unnest(l.msg_ids) AS m(id)
		    WHERE t.topic = $1)
		SELECT (SELECT count(*) FROM x a JOIN x c ON a.id = c.id AND a.lease_id < c.lease_id
		        WHERE tstzrange(a.created_at, a.expires_at) && tstzrange(c.created_at, c.expires_at)),
		       (SELECT count(*) FROM x a JOIN x c ON a.id = c.id
		            AND (a.created_at, a.lease_id) < (c.created_at, c.lease_id)
		        WHERE a.settled)`, topic).Scan(&overlaps, &afterSettle))
	return overlaps, afterSettle
}

// Invariant 5 (docs/design.md §3.5) and exactly-once: 4 consumers on their own connections compete
// for 10,000 messages.
//   - With long leases and everyone acking, each message is delivered
//     exactly once and the union of what was acked is everything published.
//   - With 1-second leases and consumers that sometimes stall past their
//     lease, messages are re-delivered, but no message is ever held by two
//     leases whose [created, expires) intervals overlap, a stale ack is
//     fenced (PGQ11) and every message is settled exactly once in the end.
func TestQueueCompetingConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	const total, consumers = 10_000, 4

	type got struct {
		lease int64
		msgs  []int64
	}
	run := func(t *testing.T, topic, lease string, stallEvery int) (deliveries []got, acked [][]int64, fenced int64) {
		var (
			mu       sync.Mutex
			nAcked   atomic.Int64
			wg       sync.WaitGroup
			errs     = make(chan error, consumers)
			ackedBy  = make([][]int64, consumers)
			deadline = time.Now().Add(5 * time.Minute)
		)
		for c := 0; c < consumers; c++ {
			conn := b.Conn(t)
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
				name := fmt.Sprintf("c%d", c)
				for nAcked.Load() < total {
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("%s: only %d of %d acked before the deadline", name, nAcked.Load(), total)
						return
					}
					ms, err := readMsgs(b.ctx, conn, topic, nil, name, 1+rng.IntN(100), lease)
					if err != nil {
						errs <- err
						return
					}
					if len(ms) == 0 {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					mu.Lock()
					deliveries = append(deliveries, got{ms[0].LeaseID, ids(ms)})
					mu.Unlock()
					if stallEvery > 0 && rng.IntN(stallEvery) == 0 {
						time.Sleep(1200 * time.Millisecond) // past the lease: others may take it
					}
					var n int
					err = conn.QueryRow(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID).Scan(&n)
					switch qState(err) {
					case "":
						if err != nil {
							errs <- err
							return
						}
						ackedBy[c] = append(ackedBy[c], ids(ms)...)
						nAcked.Add(int64(n))
					case "PGQ11":
						atomic.AddInt64(&fenced, 1)
					default:
						errs <- err
						return
					}
				}
				errs <- nil
			}(c)
		}
		wg.Wait()
		for c := 0; c < consumers; c++ {
			require.NoError(t, <-errs)
		}
		return deliveries, ackedBy, fenced
	}

	t.Run("long leases: exactly once", func(t *testing.T) {
		topic := "compete.long"
		b.createTopic(t, b.Pool, topic)
		var published []int64
		for i := 0; i < 10; i++ {
			published = append(published, b.qPublishN(t, b.Pool, topic, i*1000, 1000)...)
		}
		start := time.Now()
		deliveries, acked, fenced := run(t, topic, "5 minutes", 0)
		t.Logf("4 consumers drained %d messages in %v (%d leases)", total, time.Since(start), len(deliveries))
		require.Zero(t, fenced)
		var all, union []int64
		for _, d := range deliveries {
			all = append(all, d.msgs...)
		}
		qSameSet(t, published, all, "deliveries (each message exactly once)")
		for c, a := range acked {
			t.Logf("consumer c%d acked %d", c, len(a))
			union = append(union, a...)
		}
		qSameSet(t, published, union, "union of acked")
		overlaps, afterSettle := b.qLeaseOverlaps(t, topic)
		require.Zero(t, overlaps)
		require.Zero(t, afterSettle)
	})

	t.Run("short leases and stalls: exclusive and fenced", func(t *testing.T) {
		topic := "compete.short"
		b.createTopic(t, b.Pool, topic, "max_attempts => 1000")
		var published []int64
		for i := 0; i < 10; i++ {
			published = append(published, b.qPublishN(t, b.Pool, topic, i*1000, 1000)...)
		}
		start := time.Now()
		deliveries, acked, fenced := run(t, topic, "1 second", 25)
		t.Logf("%d leases, %d stale acks fenced, drained in %v", len(deliveries), fenced, time.Since(start))

		// What consumers received is exactly what the lease table says they held.
		var leaseRows []got
		rows, err := b.Pool.Query(b.ctx, `
			SELECT fanout._lease_code(l.lease_id, true), l.msg_ids FROM audit.lease_all l
			JOIN fanout.consumer_group g ON g.group_id = l.group_id
			JOIN fanout.topic t ON t.topic_id = g.topic_id WHERE t.topic = $1 ORDER BY 1`, topic)
		require.NoError(t, err)
		leaseRows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (got, error) {
			var g got
			return g, r.Scan(&g.lease, &g.msgs)
		})
		require.NoError(t, err)
		slices.SortFunc(deliveries, func(x, y got) int { return cmp.Compare(x.lease, y.lease) })
		require.Equal(t, len(leaseRows), len(deliveries))
		for i := range leaseRows {
			require.Equal(t, leaseRows[i].lease, deliveries[i].lease)
			require.ElementsMatch(t, leaseRows[i].msgs, deliveries[i].msgs)
		}

		// Never two unexpired holders; nothing re-delivered once settled.
		overlaps, afterSettle := b.qLeaseOverlaps(t, topic)
		require.Zero(t, overlaps, "a message was held by two unexpired leases")
		require.Zero(t, afterSettle, "a settled message was delivered again")

		// Every message acked exactly once across all consumers.
		var union []int64
		for _, a := range acked {
			union = append(union, a...)
		}
		qSameSet(t, published, union, "union of acked")
		var settledTwice int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT count(*) FROM (
			    SELECT s FROM audit.lease_all l JOIN fanout.consumer_group g ON g.group_id = l.group_id
			    JOIN fanout.topic t ON t.topic_id = g.topic_id, unnest(l.settled) s
			    WHERE t.topic = $1 GROUP BY s HAVING count(*) > 1) x`, topic).Scan(&settledTwice))
		require.Zero(t, settledTwice)
		require.Empty(t, b.read(t, b.Pool, topic, nil, "late", 100, "1 second"), "nothing left over")
	})
}

// Invariant 4 (docs/design.md §3.4): a consumer reads 100 messages under a short lease and
// disappears. Once the lease has expired another consumer gets exactly those
// 100 (attempt 2); the stale lease's ack is fenced with PGQ11. An ack on an
// expired lease whose messages nobody took succeeds.
func TestQueueCrashedConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "crash"
	b.createTopic(t, b.Pool, topic)
	first := b.qPublishN(t, b.Pool, topic, 0, 100)

	crashed := b.Conn(t)
	// (3 s: the next two steps must come before it expires, even on a
	// loaded machine, or "slow" would be handed the crashed consumer's page.)
	ms := b.read(t, crashed, topic, nil, "crashed", 100, "3 seconds")
	require.Equal(t, first, ids(ms))
	stale := ms[0].LeaseID
	require.NoError(t, crashed.Close(b.ctx)) // gone without acking

	// Another lease that expires later and that nobody will take.
	second := b.qPublishN(t, b.Pool, topic, 100, 10)
	ms = b.read(t, b.Pool, topic, nil, "slow", 10, "4 seconds")
	require.Equal(t, second, ids(ms))
	slow := ms[0].LeaseID

	b.qWaitExpired(t, stale)
	b.qWaitExpired(t, slow)
	heir := b.Conn(t)
	ms = b.read(t, heir, topic, nil, "heir", 100, "1 minute")
	require.Equal(t, first, ids(ms), "exactly the 100 un-acked messages of the crashed consumer")
	for _, m := range ms {
		require.Equal(t, int32(2), m.Attempt)
	}

	// Fencing: the crashed consumer's lease can no longer ack, nack or extend.
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", stale)
	requireSQLState(t, err, "PGQ11")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.ack($1, $2)", stale, first[:1])
	requireSQLState(t, err, "PGQ11")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.nack($1)", stale)
	requireSQLState(t, err, "PGQ11")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.extend_lease($1, '1 minute')", stale)
	requireSQLState(t, err, "PGQ11")

	// Expired but not taken: the slow consumer's ack still works, and those
	// messages are never delivered again.
	require.Equal(t, 10, b.ack(t, b.Pool, slow, nil))
	require.Equal(t, 100, b.ack(t, heir, ms[0].LeaseID, nil))
	require.Empty(t, b.read(t, b.Pool, topic, nil, "after", 1000, "1 minute"))
}

// Acking 30 of 100 leased messages: after the lease expires only the other
// 70 come back.
func TestQueuePartialAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "partial"
	b.createTopic(t, b.Pool, topic)
	published := b.qPublishN(t, b.Pool, topic, 0, 100)
	ms := b.read(t, b.Pool, topic, nil, "w1", 100, "1 second")
	require.Equal(t, published, ids(ms))
	lease := ms[0].LeaseID

	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	perm := rng.Perm(100)
	var ackedIDs, rest []int64
	for i, p := range perm {
		if i < 30 {
			ackedIDs = append(ackedIDs, published[p])
		} else {
			rest = append(rest, published[p])
		}
	}
	require.Equal(t, 30, b.ack(t, b.Pool, lease, ackedIDs))
	require.Equal(t, 0, b.ack(t, b.Pool, lease, ackedIDs[:5]), "acking again settles nothing")

	b.qWaitExpired(t, lease)
	back := b.read(t, b.Pool, topic, nil, "w2", 1000, "1 minute")
	qSameSet(t, rest, ids(back), "re-delivered after expiry")
	for _, m := range back {
		require.Equal(t, int32(2), m.Attempt)
	}
	require.Equal(t, 70, b.ack(t, b.Pool, back[0].LeaseID, nil))
	// The 30 acked ones are still settled on the old lease; the other 70 fenced.
	require.Equal(t, 0, b.ack(t, b.Pool, lease, ackedIDs))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.ack($1, $2)", lease, rest[:1])
	requireSQLState(t, err, "PGQ11")
	require.Empty(t, b.read(t, b.Pool, topic, nil, "w3", 1000, "1 minute"))
}

// ack works inside the consumer's business transaction: a rollback leaves
// the message un-acked (it comes back after the lease), a commit settles it.
// extend_lease keeps a message from being re-claimed.
func TestQueueAckInBusinessTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "business"
	b.createTopic(t, b.Pool, topic)
	_, err := b.Pool.Exec(b.ctx, "CREATE TABLE orders (message_id bigint PRIMARY KEY)")
	require.NoError(t, err)
	id := b.publish(t, b.Pool, topic, `{"order":42}`)
	worker := b.Conn(t)

	processed := func() bool {
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT EXISTS (SELECT 1 FROM orders WHERE message_id = $1)", id).Scan(&ok))
		return ok
	}

	// Business transaction rolls back: neither the order nor the ack happened.
	ms := b.read(t, worker, topic, nil, "w", 10, "1 second")
	require.Equal(t, []int64{id}, ids(ms))
	tx, err := worker.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "INSERT INTO orders VALUES ($1)", id)
	require.NoError(t, err)
	require.Equal(t, 1, b.ack(t, tx, ms[0].LeaseID, nil))
	require.NoError(t, tx.Rollback(b.ctx))
	require.False(t, processed())
	b.qWaitExpired(t, ms[0].LeaseID)
	ms = b.read(t, worker, topic, nil, "w", 10, "1 second")
	require.Equal(t, []int64{id}, ids(ms), "the rolled-back ack left the message un-acked")
	require.Equal(t, int32(2), ms[0].Attempt)

	// Business transaction commits: order and ack together.
	tx, err = worker.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "INSERT INTO orders VALUES ($1)", id)
	require.NoError(t, err)
	require.Equal(t, 1, b.ack(t, tx, ms[0].LeaseID, nil))
	require.NoError(t, tx.Commit(b.ctx))
	require.True(t, processed())
	b.qWaitExpired(t, ms[0].LeaseID)
	require.Empty(t, b.read(t, b.Pool, topic, nil, "other", 10, "1 minute"), "the committed ack settled it")

	// extend_lease: the message is not re-claimed after the original expiry.
	id2 := b.publish(t, b.Pool, topic, `{"order":43}`)
	ms = b.read(t, worker, topic, nil, "w", 10, "1 second")
	require.Equal(t, []int64{id2}, ids(ms))
	var extendedPastHour bool
	require.NoError(t, worker.QueryRow(b.ctx,
		"SELECT fanout.extend_lease($1, '1 hour') > clock_timestamp() + interval '59 minutes'",
		ms[0].LeaseID).Scan(&extendedPastHour))
	require.True(t, extendedPastHour)
	// Wait until the original 1-second lease would have expired.
	for {
		var past bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT created_at + interval '1.2 seconds' <= clock_timestamp() FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)",
			ms[0].LeaseID).Scan(&past))
		if past {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(t, b.read(t, b.Pool, topic, nil, "other", 10, "1 minute"), "an extended lease is not re-claimed")
	require.Equal(t, 1, b.ack(t, worker, ms[0].LeaseID, nil))
}
