package tests

// Edge cases of partitioned topics (README, "Ordering"): scripted
// interleavings on several real connections. Every scenario asserts the
// contract with booleans; a failing assertion names the contract sentence.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// --- small helpers (prefix rv) ---

func (b *bundle) rwPub(t *testing.T, q querier, topic, key, payload string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, $2::jsonb, message_group => $3)`,
		topic, payload, key).Scan(&id))
	return id
}

func (b *bundle) rwPubN(t *testing.T, q querier, topic, key string, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		out[i] = b.rwPub(t, q, topic, key, fmt.Sprintf(`{"i": %d}`, i))
	}
	return out
}

func rwRead(ctx context.Context, q querier, topic string, group *string, consumer string, max int, lease string) ([]msg, error) {
	return pReadAs(ctx, q, topic, group, &consumer, max, lease, nil)
}

func (b *bundle) rwAck(q querier, lease int64, ids []int64) (int, error) {
	var n int
	err := q.QueryRow(b.ctx, `SELECT fanout.ack($1, $2)`, lease, ids).Scan(&n)
	return n, err
}

// rwAsync runs f in a goroutine; the channel gets its error.
func rwAsync(f func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// rwPubsub creates pubsub topic topic with parts key partitions and
// subscribes group "g" to it (subscribe's named options in subOpts, each
// with a leading comma).
func (b *bundle) rwPubsub(t *testing.T, topic string, parts int, subOpts string) {
	t.Helper()
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", fmt.Sprintf("partitions => %d", parts))
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe($1, 'g'`+subOpts+`)`, topic)
	require.NoError(t, err)
}

// rwWithin: the call reported on ch within d (it did not block).
func rwWithin(ch chan error, d time.Duration) (error, bool) {
	select {
	case err := <-ch:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

func (b *bundle) rwGen(t *testing.T, topic, group string, k int) (string, int64) {
	t.Helper()
	var owner string
	var gen int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT coalesce(owner, ''), generation FROM fanout.partitions
		WHERE topic = $1 AND group_name IS NOT DISTINCT FROM $2 AND partition = $3`, topic, group, k).Scan(&owner, &gen))
	return owner, gen
}

// --- scenarios ---

// Partial ack, then expiry: the takeover page is exactly the unsettled
// messages, in order, before newer ones; the old holder is fenced. On a
// pubsub group and on a queue (default semantics) topic.
func TestPartitionsEdgePartialAckThenExpiry(t *testing.T) {
	t.Parallel()
	for _, sem := range []string{"pubsub", "queue"} {
		t.Run(sem, func(t *testing.T) {
			b := setup(t)
			b.keepLeaseHistory(t)
			var grp *string
			if sem == "pubsub" {
				b.rwPubsub(t, "t", 1, "")
				grp = ptr("g")
			} else {
				b.createTopic(t, b.Pool, "t", "partitions => 1")
			}
			s1, s2 := b.Conn(t), b.Conn(t)
			m := b.rwPubN(t, b.Pool, "t", "k", 5)
			p1, err := rwRead(b.ctx, s1, "t", grp, "A", 3, "1 second")
			require.NoError(t, err)
			require.Equal(t, m[:3], ids(p1))
			n, err := b.rwAck(s1, p1[0].LeaseID, []int64{m[1]})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			b.qWaitExpired(t, p1[0].LeaseID)
			m6 := b.rwPub(t, b.Pool, "t", "k", `{"i": 5}`)
			p2, err := rwRead(b.ctx, s2, "t", grp, "A", 10, "1 hour")
			require.NoError(t, err)
			require.Equal(t, []int64{m[0], m[2]}, ids(p2), "takeover page = exactly the unsettled messages, in order, first")
			for _, x := range p2 {
				require.Equal(t, int32(2), x.Attempt)
			}
			_, err = b.rwAck(s1, p1[0].LeaseID, []int64{m[0]})
			require.Equal(t, "PGQ11", pgState(err), "old holder's ack of a taken-over message")
			_, err = b.rwAck(s1, p1[0].LeaseID, nil)
			require.Equal(t, "PGQ11", pgState(err))
			_, err = s1.Exec(b.ctx, `SELECT fanout.extend_lease($1, '1 minute')`, p1[0].LeaseID)
			require.Equal(t, "PGQ11", pgState(err), "extend of a taken-over page")
			n, err = b.rwAck(s1, p1[0].LeaseID, []int64{m[1]})
			require.NoError(t, err, "re-ack of the message it did settle")
			require.Zero(t, n)
			again, err := rwRead(b.ctx, s1, "t", grp, "A", 10, "1 hour")
			require.NoError(t, err)
			require.Empty(t, again, "next page before the takeover page was settled")
			n, err = b.rwAck(s2, p2[0].LeaseID, nil)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			p3, err := rwRead(b.ctx, s1, "t", grp, "A", 10, "1 hour")
			require.NoError(t, err)
			require.Equal(t, []int64{m[3], m[4], m6}, ids(p3))
			b.pRequireOnePagePerPartition(t, "t")
		})
	}
}

// Nack of part of a page, then the page's lease expires. "A nack blocks its
// partition until the message is acked or dead-lettered: the partition
// waits for retry_in, then hands out the retried messages alone, then goes
// on." The nacked m1 precedes m2, m3 in commit order.
func TestPartitionsEdgeNackPartThenExpiry(t *testing.T) {
	t.Parallel()
	for _, retry := range []string{"0", "2 seconds"} {
		t.Run("retry_in="+retry, func(t *testing.T) {
			b := setup(t)
			b.rwPubsub(t, "t", 1, "")
			var err error
			m := b.rwPubN(t, b.Pool, "t", "k", 4)
			p1, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 3, "1 second")
			require.NoError(t, err)
			require.Equal(t, m[:3], ids(p1))
			b.qNack(t, b.Pool, p1[0].LeaseID, []int64{m[0]}, ptr(retry), "boom")
			b.qWaitExpired(t, p1[0].LeaseID)
			var order []int64
			deadline := time.Now().Add(20 * time.Second)
			for len(order) < 4 && time.Now().Before(deadline) {
				ms, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
				require.NoError(t, err)
				if len(ms) == 0 {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				order = append(order, ids(ms)...)
				_, err = b.rwAck(b.Pool, ms[0].LeaseID, nil)
				require.NoError(t, err)
			}
			require.Equal(t, m, order, "per-key commit order: nacked m1 must come (alone) before m2, m3 are handed out again")
		})
	}
}

// Nack part of a page, ack the rest: the retried message alone, then on.
func TestPartitionsEdgeNackPartAckRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rwPubsub(t, "t", 1, "")
	var err error
	m := b.rwPubN(t, b.Pool, "t", "k", 4)
	p1, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	b.qNack(t, b.Pool, p1[0].LeaseID, []int64{m[0]}, ptr("0"), "boom")
	n, err := b.rwAck(b.Pool, p1[0].LeaseID, []int64{m[1], m[2]})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	p2, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{m[0]}, ids(p2), "retried message alone")
	require.Equal(t, int32(2), p2[0].Attempt)
	again, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Empty(t, again)
	_, err = b.rwAck(b.Pool, p2[0].LeaseID, nil)
	require.NoError(t, err)
	p3, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{m[3]}, ids(p3))
}

// extend_lease racing a takeover, both ways.
func TestPartitionsEdgeExtendRacingTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 1, "")
	var err error
	holder, reader := b.Conn(t), b.Conn(t)
	m := b.rwPubN(t, b.Pool, "t", "k", 6)

	// (a) the extension (uncommitted) holds the lease: the read skips, does not wait.
	p1, err := rwRead(b.ctx, holder, "t", ptr("g"), "A", 3, "1 second")
	require.NoError(t, err)
	b.qWaitExpired(t, p1[0].LeaseID)
	tx, err := holder.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.extend_lease($1, '1 hour')`, p1[0].LeaseID)
	require.NoError(t, err)
	var got []msg
	ch := rwAsync(func() error { var e error; got, e = rwRead(b.ctx, reader, "t", ptr("g"), "A", 3, "1 hour"); return e })
	err, done := rwWithin(ch, 5*time.Second)
	require.True(t, done, "a read waited for an extend_lease (no member ever waits)")
	require.NoError(t, err)
	require.Empty(t, got, "read handed out a page while an extension held the expired page")
	require.NoError(t, tx.Commit(b.ctx))
	got, err = rwRead(b.ctx, reader, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	require.Empty(t, got, "extended page taken over")
	n, err := b.rwAck(holder, p1[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	// (b) the takeover (uncommitted) holds the lease: extend waits, then PGQ11.
	p2, err := rwRead(b.ctx, holder, "t", ptr("g"), "A", 3, "1 second")
	require.NoError(t, err)
	require.Equal(t, m[3:], ids(p2))
	b.qWaitExpired(t, p2[0].LeaseID)
	rtx, err := reader.Begin(b.ctx)
	require.NoError(t, err)
	got, err = rwRead(b.ctx, rtx, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	require.Equal(t, m[3:], ids(got))
	ch = rwAsync(func() error {
		_, e := holder.Exec(b.ctx, `SELECT fanout.extend_lease($1, '1 hour')`, p2[0].LeaseID)
		return e
	})
	b.tWaitBlockedOrDone(t, holder, ch) // (the extension waits for the takeover's transaction)
	require.NoError(t, rtx.Commit(b.ctx))
	err = <-ch
	require.Equal(t, "PGQ11", pgState(err), "extend of a page taken over must be fenced")
	b.pRequireOnePagePerPartition(t, "t")
}

// An ack in a long business transaction while another session's read sees
// the lease expired: the read skips (no wait). Rolled back: the page is
// taken over whole. Committed: the next page goes out.
func TestPartitionsEdgeLongAckVsExpiredRead(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			b := setup(t)
			b.keepLeaseHistory(t)
			b.rwPubsub(t, "t", 1, "")
			var err error
			worker, other := b.Conn(t), b.Conn(t)
			m := b.rwPubN(t, b.Pool, "t", "k", 6)
			p1, err := rwRead(b.ctx, worker, "t", ptr("g"), "A", 3, "1 second")
			require.NoError(t, err)
			b.qWaitExpired(t, p1[0].LeaseID)
			tx, err := worker.Begin(b.ctx)
			require.NoError(t, err)
			n, err := b.rwAck(tx, p1[0].LeaseID, nil)
			require.NoError(t, err, "late ack of an expired, not taken-over page")
			require.Equal(t, 3, n)
			var got []msg
			ch := rwAsync(func() error { var e error; got, e = rwRead(b.ctx, other, "t", ptr("g"), "A", 3, "1 hour"); return e })
			err, done := rwWithin(ch, 5*time.Second)
			require.True(t, done, "read waited for the business transaction")
			require.NoError(t, err)
			require.Empty(t, got, "a page went out while the previous one's ack was pending")
			if commit {
				require.NoError(t, tx.Commit(b.ctx))
				got, err = rwRead(b.ctx, other, "t", ptr("g"), "A", 3, "1 hour")
				require.NoError(t, err)
				require.Equal(t, m[3:], ids(got))
				require.Equal(t, int32(1), got[0].Attempt)
			} else {
				require.NoError(t, tx.Rollback(b.ctx))
				got, err = rwRead(b.ctx, other, "t", ptr("g"), "A", 3, "1 hour")
				require.NoError(t, err)
				require.Equal(t, m[:3], ids(got), "rolled-back ack: the expired page comes again, first")
				require.Equal(t, int32(2), got[0].Attempt)
			}
			b.pRequireOnePagePerPartition(t, "t")
		})
	}
}

// A member loses its partition (it was not seen within the liveness window)
// while its page's lease runs; another member claims it (generation bumped)
// but gets nothing until the page settles. The old holder's ack then
// succeeds (not taken over); everything is delivered once, in order.
func TestPartitionsEdgeAckAfterOwnershipLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 1, ", heartbeat_timeout => '1 second'")
	var err error
	a, bb := b.Conn(t), b.Conn(t)
	m := b.rwPubN(t, b.Pool, "t", "k", 6)
	p1, err := rwRead(b.ctx, a, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	_, gen0 := b.rwGen(t, "t", "g", 0)
	time.Sleep(1500 * time.Millisecond)
	got, err := rwRead(b.ctx, bb, "t", ptr("g"), "B", 3, "1 hour")
	require.NoError(t, err)
	require.Empty(t, got, "second page while the first is open")
	owner, gen1 := b.rwGen(t, "t", "g", 0)
	require.Equal(t, "B", owner)
	require.Greater(t, gen1, gen0, "ownership change bumps generation")
	n, err := b.rwAck(a, p1[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var order []int64
	for i := 0; i < 20 && len(order) < 3; i++ {
		for _, c := range []struct {
			conn *pgx.Conn
			name string
		}{{a, "A"}, {bb, "B"}} {
			ms, err := rwRead(b.ctx, c.conn, "t", ptr("g"), c.name, 10, "1 hour")
			require.NoError(t, err)
			if len(ms) > 0 {
				order = append(order, ids(ms)...)
				_, err = b.rwAck(c.conn, ms[0].LeaseID, nil)
				require.NoError(t, err)
			}
		}
	}
	require.Equal(t, m[3:], order)
	b.pRequireOnePagePerPartition(t, "t")
}

// Two sessions of the same consumer name: one holds its read uncommitted,
// the other must not get a page of that partition; then a concurrent run
// of two sessions per name keeps per-key order and one page per partition.
func TestPartitionsEdgeSameConsumerTwoSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 4, "")
	var err error
	s1, s2 := b.Conn(t), b.Conn(t)
	b.rwPubN(t, b.Pool, "t", "k", 4)
	// Cold name (first read of "x" ever, from two sessions at once): the
	// second session waits on the first one's transaction (member row
	// insert). Reported, not fatal here.
	{
		tx, err := s1.Begin(b.ctx)
		require.NoError(t, err)
		_, err = rwRead(b.ctx, tx, "t", ptr("g"), "x", 1, "1 second")
		require.NoError(t, err)
		ch := rwAsync(func() error { _, e := rwRead(b.ctx, s2, "t", ptr("g"), "x", 1, "1 second"); return e })
		_, done := rwWithin(ch, 3*time.Second)
		t.Logf("cold same-name second session waited: %v", !done)
		require.NoError(t, tx.Rollback(b.ctx))
		require.NoError(t, <-ch)
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.nack(fanout._lease_code(lease_id, true)) FROM fanout.lease WHERE open_count > 0`)
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.member SET last_seen = now() - interval '1 hour' WHERE consumer = 'x'`)
		require.NoError(t, err)
		_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.kpart SET owner = NULL`)
		require.NoError(t, err)
	}
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout._touch_member(group_id, 'w', now(), true) FROM fanout.consumer_group`)
	require.NoError(t, err) // warm name
	tx, err := s1.Begin(b.ctx)
	require.NoError(t, err)
	p1, err := rwRead(b.ctx, tx, "t", ptr("g"), "w", 2, "1 hour")
	require.NoError(t, err)
	require.NotEmpty(t, p1)
	var got []msg
	ch := rwAsync(func() error { var e error; got, e = rwRead(b.ctx, s2, "t", ptr("g"), "w", 2, "1 hour"); return e })
	err, done := rwWithin(ch, 5*time.Second)
	require.True(t, done, "same-name session waited")
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, tx.Commit(b.ctx))
	got, err = rwRead(b.ctx, s2, "t", ptr("g"), "w", 2, "1 hour")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = b.rwAck(s2, p1[0].LeaseID, nil)
	require.NoError(t, err)

	// Concurrent: 40 keys x 10 in-order messages; 4 sessions, 2 names.
	_, err = b.Pool.Exec(b.ctx, `CREATE TABLE progress (k text PRIMARY KEY, seq int NOT NULL)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `INSERT INTO progress SELECT 'key-' || i, -1 FROM generate_series(0, 39) i`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.read('t', 'g', 'w', 100)`) // drain the 2 left of k
	require.NoError(t, err)
	for s := 0; s < 10; s++ {
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('t', array_agg(jsonb_build_object('k', 'key-' || i, 's', $1::int)),
			message_groups => array_agg('key-' || i)) FROM generate_series(0, 39) i`, s)
		require.NoError(t, err)
	}
	// Release the leftover page of k by acking it.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.ack(fanout._lease_code(lease_id, true)) FROM fanout.lease WHERE open_count > 0`)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var bad []string
	total := 0
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		conn := b.Conn(t)
		name := []string{"w", "v"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			empty := 0
			for ctx.Err() == nil && empty < 30 {
				tx, err := conn.Begin(ctx)
				if err != nil {
					return
				}
				rows, err := tx.Query(ctx, `SELECT lease_id, message_id, payload->>'k', (payload->>'s')::int
					FROM fanout.read('t', 'g', $1, 7, '30 seconds')`, name)
				if err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					tx.Rollback(ctx) //nolint:errcheck
					return
				}
				type r struct {
					l, id int64
					k     string
					s     int
				}
				rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (r, error) {
					var x r
					return x, row.Scan(&x.l, &x.id, &x.k, &x.s)
				})
				if err != nil || len(rs) == 0 {
					tx.Rollback(ctx) //nolint:errcheck
					empty++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				empty = 0
				for _, x := range rs {
					var last int
					if err := tx.QueryRow(ctx, `SELECT seq FROM progress WHERE k = $1 FOR UPDATE`, x.k).Scan(&last); err != nil {
						return
					}
					if x.s != last+1 {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s: seq %d after %d (message %d)", x.k, x.s, last, x.id))
						mu.Unlock()
					}
					if _, err := tx.Exec(ctx, `UPDATE progress SET seq = $2 WHERE k = $1`, x.k, x.s); err != nil {
						return
					}
				}
				if _, err := tx.Exec(ctx, `SELECT fanout.ack($1)`, rs[0].l); err != nil {
					tx.Rollback(ctx) //nolint:errcheck
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					continue
				}
				mu.Lock()
				total += len(rs)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, bad)
	require.Equal(t, 400, total, "every message once")
	var notLast int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM progress WHERE seq <> 9`).Scan(&notLast))
	require.Zero(t, notLast, "a key's last processed message was not its last published one")
	b.pRequireOnePagePerPartition(t, "t")
}

// An explicit read of partition k at the same moment as an automatic read
// holding k's page (uncommitted): never two pages of k at once.
func TestPartitionsEdgeExplicitVsAutomaticSameMoment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 1, "")
	var err error
	auto, expl := b.Conn(t), b.Conn(t)
	b.rwPubN(t, b.Pool, "t", "k", 6)
	tx, err := auto.Begin(b.ctx)
	require.NoError(t, err)
	p1, err := rwRead(b.ctx, tx, "t", ptr("g"), "w", 3, "1 hour")
	require.NoError(t, err)
	require.Len(t, p1, 3)
	var got []msg
	ch := rwAsync(func() error {
		var e error
		got, e = pReadAs(b.ctx, expl, "t", ptr("g"), nil, 3, "1 hour", ptr(0))
		return e
	})
	b.tWaitBlockedOrDone(t, expl, ch)
	require.NoError(t, tx.Commit(b.ctx))
	err = <-ch
	if err == nil {
		require.Empty(t, got, "explicit read handed out a page of a partition whose page was out")
	} else {
		require.Equal(t, "PGQ24", pgState(err))
	}
	b.pRequireOnePagePerPartition(t, "t")
}

// alter_topic raising P while pages are out and producers publish. Keys
// that did not move keep per-key order; nothing is lost or duplicated; one
// page per partition.
func TestPartitionsEdgeRaisePWhileBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 2, "")
	var err error
	pubSeq := func(q querier, s int) {
		_, err := q.Exec(b.ctx, `SELECT fanout.publish_batch('t', array_agg(jsonb_build_object('k', 'key-' || i, 's', $1::int)),
			message_groups => array_agg('key-' || i)) FROM generate_series(0, 19) i`, s)
		require.NoError(t, err)
	}
	for s := 0; s < 3; s++ {
		pubSeq(b.Pool, s)
	}
	a := b.Conn(t)
	held, err := rwRead(b.ctx, a, "t", ptr("g"), "A", 5, "1 hour")
	require.NoError(t, err)
	require.NotEmpty(t, held)

	// A producer transaction open across the raise.
	prod := b.Conn(t)
	ptx, err := prod.Begin(b.ctx)
	require.NoError(t, err)
	pubSeq(ptx, 3)
	alt := b.Conn(t)
	ch := rwAsync(func() error { _, e := alt.Exec(b.ctx, `SELECT fanout.alter_topic('t', partitions => 4)`); return e })
	altBlocked := b.tWaitBlockedOrDone(t, alt, ch)
	t.Logf("alter_topic waited for the open producer transaction: %v", altBlocked)
	if altBlocked {
		pubSeq(ptx, 4)
		require.NoError(t, ptx.Commit(b.ctx))
		require.NoError(t, <-ch)
	} else {
		require.NoError(t, <-ch)
		pubSeq(ptx, 4)
		require.NoError(t, ptx.Commit(b.ctx))
	}
	var split int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout_data.m1 WHERE (payload->>'s')::int = 4
		AND kpart <> fanout._kpart_of(message_group, 2)`).Scan(&split))
	t.Logf("messages of the producer transaction open across the raise, published after it, in a new partition: %d", split)
	for s := 5; s < 8; s++ {
		pubSeq(b.Pool, s)
	}
	_, err = b.rwAck(a, held[0].LeaseID, nil)
	require.NoError(t, err)

	// Drain with two members, acking each page at once: processing order = read order.
	type rec struct {
		k string
		s int
	}
	var order []rec
	order = append(order, func() []rec {
		var out []rec
		for _, m := range held {
			var k string
			var s int
			require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT $1::jsonb->>'k', ($1::jsonb->>'s')::int`, string(m.Payload)).Scan(&k, &s))
			out = append(out, rec{k, s})
		}
		return out
	}()...)
	bconn := b.Conn(t)
	empty := 0
	for empty < 6 {
		progress := false
		for _, c := range []struct {
			conn *pgx.Conn
			name string
		}{{a, "A"}, {bconn, "B"}} {
			rows, err := c.conn.Query(b.ctx, `SELECT lease_id, payload->>'k', (payload->>'s')::int FROM fanout.read('t', 'g', $1, 7, '1 hour')`, c.name)
			require.NoError(t, err)
			var lease int64
			for rows.Next() {
				var r rec
				require.NoError(t, rows.Scan(&lease, &r.k, &r.s))
				order = append(order, r)
			}
			require.NoError(t, rows.Err())
			if lease != 0 {
				progress = true
				_, err = b.rwAck(c.conn, lease, nil)
				require.NoError(t, err)
			}
		}
		if progress {
			empty = 0
		} else {
			empty++
		}
	}
	require.Len(t, order, 160, "every message once")
	seen := map[rec]bool{}
	for _, r := range order {
		require.False(t, seen[r], "duplicate %v", r)
		seen[r] = true
	}
	moved := map[string]bool{}
	rows, err := b.Pool.Query(b.ctx, `SELECT 'key-' || i, fanout._kpart_of('key-' || i, 4) <> fanout._kpart_of('key-' || i, 2)
		FROM generate_series(0, 19) i`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var mv bool
		require.NoError(t, rows.Scan(&k, &mv))
		moved[k] = mv
	}
	last := map[string]int{}
	var inv []string
	for _, r := range order {
		if l, ok := last[r.k]; ok && r.s < l && !moved[r.k] {
			inv = append(inv, fmt.Sprintf("%s: %d after %d", r.k, r.s, l))
		}
		if r.s > last[r.k] {
			last[r.k] = r.s
		}
	}
	require.Empty(t, inv, "per-key order of a key that did not move")
	b.pRequireOnePagePerPartition(t, "t")
}

// whole_transactions.
func TestPartitionsEdgeWholeTransactions(t *testing.T) {
	t.Parallel()
	pub250 := func(b *bundle, t *testing.T, q querier, topic, key string, n int) {
		_, err := q.Exec(b.ctx, `SELECT fanout.publish_batch($1, array_agg(jsonb_build_object('i', i)),
			message_groups => array_agg($2::text)) FROM generate_series(1, $3) i`, topic, key, n)
		require.NoError(t, err)
	}
	t.Run("retried page of a 250-message transaction", func(t *testing.T) {
		b := setup(t)
		b.createTopic(t, b.Pool, "w", "partitions => 1", "whole_transactions => true")
		pub250(b, t, b.Pool, "w", "k", 250)
		p1 := b.read(t, b.Pool, "w", nil, "c", 100, "1 hour")
		require.Len(t, p1, 250)
		b.qNack(t, b.Pool, p1[0].LeaseID, nil, ptr("0"), "retry")
		p2 := b.read(t, b.Pool, "w", nil, "c", 100, "1 hour")
		require.Equal(t, 250, len(p2), "whole_transactions: a page never ends inside one producer transaction (retried page)")
	})
	t.Run("expired page of a 250-message transaction", func(t *testing.T) {
		b := setup(t)
		b.createTopic(t, b.Pool, "w", "partitions => 1", "whole_transactions => true")
		pub250(b, t, b.Pool, "w", "k", 250)
		p1 := b.read(t, b.Pool, "w", nil, "c", 100, "1 second")
		require.Len(t, p1, 250)
		b.qWaitExpired(t, p1[0].LeaseID)
		p2 := b.read(t, b.Pool, "w", nil, "c", 100, "1 hour")
		require.Len(t, p2, 250)
	})
	t.Run("transaction committing after a read began (phase 1)", func(t *testing.T) {
		b := setup(t)
		b.createTopic(t, b.Pool, "w", "partitions => 1", "whole_transactions => true")
		b.rwPub(t, b.Pool, "w", "k", `{}`)
		prod := b.Conn(t)
		tx, err := prod.Begin(b.ctx)
		require.NoError(t, err)
		pub250(b, t, tx, "w", "k", 250)
		p1 := b.read(t, b.Pool, "w", nil, "c", 100, "1 hour")
		require.Len(t, p1, 1)
		b.ack(t, b.Pool, p1[0].LeaseID, nil)
		pub250(b, t, b.Pool, "w", "k", 30) // a later, committed transaction
		require.NoError(t, tx.Commit(b.ctx))
		p2 := b.read(t, b.Pool, "w", nil, "c", 100, "1 hour")
		// whichever transaction comes first, the page may not end inside one
		require.Contains(t, []int{30, 250, 280}, len(p2), "page ended inside a producer transaction")
	})
	t.Run("transaction spanning two partitions", func(t *testing.T) {
		b := setup(t)
		b.createTopic(t, b.Pool, "w", "semantics => 'pubsub'", "partitions => 2", "whole_transactions => true")
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('w', 'g')`)
		require.NoError(t, err)
		var k0, k1 string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT min(k) FILTER (WHERE fanout.partition_of('w', k) = 0),
			min(k) FILTER (WHERE fanout.partition_of('w', k) = 1) FROM (SELECT 'key-' || i AS k FROM generate_series(1, 20) i) x`).
			Scan(&k0, &k1))
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('w', array_agg(jsonb_build_object('i', i)),
			message_groups => array_agg(CASE WHEN i % 2 = 0 THEN $1 ELSE $2 END)) FROM generate_series(1, 300) i`, k0, k1)
		require.NoError(t, err)
		for k, key := range []string{k0, k1} {
			ms, err := pReadAs(b.ctx, b.Pool, "w", ptr("g"), nil, 100, "1 hour", ptr(k))
			require.NoError(t, err)
			require.Len(t, ms, 150, "partition %d: the transaction's messages of that partition, whole", k)
			for _, m := range ms {
				require.Equal(t, key, *m.Group)
			}
		}
	})
	t.Run("max_bytes cut inside a transaction", func(t *testing.T) {
		b := setup(t)
		b.createTopic(t, b.Pool, "w", "partitions => 1", "whole_transactions => true")
		pub250(b, t, b.Pool, "w", "k", 50)
		rows, err := b.Pool.Query(b.ctx, `SELECT message_id FROM fanout.read('w', NULL, 'c', 100, '1 hour', max_bytes => 100)`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, got, 50)
	})
}

// Out-of-order commits of two producers on one key: the later-started one
// commits first. The delivery rule (README, "Ordering"): what one read's
// window sees comes by transaction id, then id; what commits after a read
// comes after what that read could see. So a reader that reads between the
// two commits gets b then a; one that reads after both gets a then b.
func TestPartitionsEdgeOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rwPubsub(t, "t", 1, "")
	var err error
	pa, pb := b.Conn(t), b.Conn(t)
	ta, err := pa.Begin(b.ctx)
	require.NoError(t, err)
	ma := b.rwPub(t, ta, "t", "k", `{"who": "a"}`)
	tb, err := pb.Begin(b.ctx)
	require.NoError(t, err)
	mb := b.rwPub(t, tb, "t", "k", `{"who": "b"}`)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('t', 'between')`)
	require.NoError(t, err)
	require.NoError(t, tb.Commit(b.ctx)) // b commits first
	var between []int64
	ms, err := rwRead(b.ctx, b.Pool, "t", ptr("between"), "B", 10, "1 hour")
	require.NoError(t, err)
	between = append(between, ids(ms)...)
	require.Equal(t, []int64{mb}, between, "a is still in flight: not before it commits")
	_, err = b.rwAck(b.Pool, ms[0].LeaseID, nil)
	require.NoError(t, err)
	require.NoError(t, ta.Commit(b.ctx))
	ms, err = rwRead(b.ctx, b.Pool, "t", ptr("between"), "B", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{mb, ma}, append(between, ids(ms)...), "read between the commits: b, then a")
	ms, err = rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{ma, mb}, ids(ms), "read after both: one window, by transaction id")
}

// REPEATABLE READ producers: snapshot taken before the other producer
// commits, first write after: all delivered once, in commit order.
func TestPartitionsEdgeRepeatableReadProducers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rwPubsub(t, "t", 2, "")
	var err error
	pa := b.Conn(t)
	ta, err := pa.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = ta.Exec(b.ctx, `SELECT count(*) FROM fanout.topic`)
	require.NoError(t, err)
	mb := b.rwPub(t, b.Pool, "t", "k", `{"who": "b"}`)
	ma := b.rwPub(t, ta, "t", "k", `{"who": "a"}`)
	rd, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{mb}, ids(rd))
	_, err = b.rwAck(b.Pool, rd[0].LeaseID, nil)
	require.NoError(t, err)
	require.NoError(t, ta.Commit(b.ctx))
	rd, err = rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 10, "1 hour")
	require.NoError(t, err)
	require.Equal(t, []int64{ma}, ids(rd))
}

// A group that dies with a page out and comes back by a read: the page is
// still the partition's page; the old lease's ack works; nothing lost.
func TestPartitionsEdgeDeadGroupResurrect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "t", 2, ", heartbeat_timeout => '1 second', dead_after_misses => 1")
	var err error
	m := b.rwPubN(t, b.Pool, "t", "k", 6)
	p1, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	require.Equal(t, m[:3], ids(p1))
	time.Sleep(2200 * time.Millisecond)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout._detect_dead_groups()`)
	require.NoError(t, err)
	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.consumer_group WHERE group_name = 'g'`).Scan(&status))
	require.Equal(t, "dead", status)
	m7 := b.rwPub(t, b.Pool, "t", "k", `{"i": 6}`)
	got, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), "B", 10, "1 hour")
	require.NoError(t, err)
	require.Empty(t, got, "resurrected group: a second page of the partition went out")
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.consumer_group WHERE group_name = 'g'`).Scan(&status))
	require.Equal(t, "active", status)
	n, err := b.rwAck(b.Pool, p1[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var order []int64
	for i := 0; i < 10 && len(order) < 4; i++ {
		for _, c := range []string{"A", "B"} {
			ms, err := rwRead(b.ctx, b.Pool, "t", ptr("g"), c, 10, "1 hour")
			require.NoError(t, err)
			if len(ms) > 0 {
				order = append(order, ids(ms)...)
				_, err = b.rwAck(b.Pool, ms[0].LeaseID, nil)
				require.NoError(t, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, append(append([]int64{}, m[3:]...), m7), order)
	b.pRequireOnePagePerPartition(t, "t")
}

// drop_topic(force) while a page is out: the drop does not wait forever for
// the holder, and the holder's later ack fails cleanly.
func TestPartitionsEdgeDropTopicWithPagesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rwPubsub(t, "t", 2, "")
	var err error
	b.rwPubN(t, b.Pool, "t", "k", 3)
	holder := b.Conn(t)
	p1, err := rwRead(b.ctx, holder, "t", ptr("g"), "A", 3, "1 hour")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic('t', force => true)`)
	require.NoError(t, err)
	_, err = b.rwAck(holder, p1[0].LeaseID, nil)
	requireSQLState(t, err, "PGQ10")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM fanout.kpart) + (SELECT count(*) FROM fanout.lease)`).Scan(&n))
	require.Zero(t, n, "drop left cursors or leases")
}
