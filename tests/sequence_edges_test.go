package tests

// Edge cases of per-aggregate sequence ordering: scripted interleavings
// on named sessions. Each test states the contract sentence it checks.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// r3Pub publishes (agg, seq) with a payload naming them.
func (b *bundle) r3Pub(t *testing.T, q querier, topic, agg string, seq int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, $2::jsonb, message_group => $3, sequence => $4)`,
		topic, fmt.Sprintf(`{"agg":%q,"seq":%d}`, agg, seq), agg, seq).Scan(&id))
	return id
}

func r3Seq(t *testing.T, m msg) int64 {
	t.Helper()
	var body struct{ Seq int64 }
	require.NoError(t, json.Unmarshal(m.Payload, &body))
	return body.Seq
}

func r3Seqs(t *testing.T, ms []msg) []int64 {
	out := []int64{}
	for _, m := range ms {
		out = append(out, r3Seq(t, m))
	}
	return out
}

func (b *bundle) r3Gaps(t *testing.T, topic string) [][4]int64 {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, `SELECT message_group, missing_from, missing_to, waiting_messages
		FROM fanout.sequence_gaps WHERE topic = $1 ORDER BY message_group, missing_from`, topic)
	require.NoError(t, err)
	defer rows.Close()
	var out [][4]int64
	for rows.Next() {
		var g string
		var f, to, w int64
		require.NoError(t, rows.Scan(&g, &f, &to, &w))
		var n int64
		fmt.Sscanf(g, "a%d", &n)
		out = append(out, [4]int64{n, f, to, w})
	}
	require.NoError(t, rows.Err())
	return out
}

// S1. Nack (retry) of n while n+1 waits: n+1 stays held until n is acked.
func TestSequenceEdgeNackHoldsSuccessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.nack", "sequence_ordering => true")
	A, B := b.Conn(t), b.Conn(t)
	b.r3Pub(t, A, "r3.nack", "a", 2)
	b.r3Pub(t, A, "r3.nack", "a", 1)
	ma := b.read(t, A, "r3.nack", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, ma))
	require.Empty(t, b.read(t, B, "r3.nack", nil, "B", 10, "1 minute"), "2 before 1 settled")
	require.Equal(t, 1, b.qNack(t, A, ma[0].LeaseID, nil, ptr("0"), "boom"))
	mb := b.read(t, B, "r3.nack", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, mb), "only the retried 1, not 2")
	require.Equal(t, int32(2), mb[0].Attempt)
	require.Empty(t, b.read(t, A, "r3.nack", nil, "A", 10, "1 minute"), "2 while retried 1 is in flight")
	b.ack(t, B, mb[0].LeaseID, nil)
	ma = b.read(t, A, "r3.nack", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, ma))
}

// S2. Lease expiry of n (taken over, attempt 2): n+1 does not go out before.
func TestSequenceEdgeLeaseExpiryTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.exp", "sequence_ordering => true")
	A, B, C := b.Conn(t), b.Conn(t), b.Conn(t)
	for s := int64(1); s <= 3; s++ {
		b.r3Pub(t, A, "r3.exp", "a", s)
	}
	ma := b.read(t, A, "r3.exp", nil, "A", 10, "300 milliseconds")
	require.Equal(t, []int64{1}, r3Seqs(t, ma))
	b.qWaitExpired(t, ma[0].LeaseID)
	mb := b.read(t, B, "r3.exp", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, mb), "takeover of 1 only")
	require.Equal(t, int32(2), mb[0].Attempt)
	_, err := A.Exec(b.ctx, `SELECT fanout.ack($1)`, ma[0].LeaseID)
	requireSQLState(t, err, "PGQ11")
	require.Empty(t, b.read(t, C, "r3.exp", nil, "C", 10, "1 minute"), "fenced ack must not release 2")
	b.ack(t, B, mb[0].LeaseID, nil)
	mc := b.read(t, C, "r3.exp", nil, "C", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, mc))
}

// S3. max_attempts reached by expiry, and by nack: dead letter, then n+1
// released exactly once.
func TestSequenceEdgeMaxAttemptsDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.dl", "sequence_ordering => true", "max_attempts => 2")
	A, B := b.Conn(t), b.Conn(t)
	for s := int64(1); s <= 3; s++ {
		b.r3Pub(t, A, "r3.dl", "a", s)
		b.r3Pub(t, A, "r3.dl", "b", s)
	}
	// aggregate a: by expiry; aggregate b: by nack.
	m1 := b.read(t, A, "r3.dl", nil, "A", 10, "300 milliseconds")
	require.ElementsMatch(t, []int64{1, 1}, r3Seqs(t, m1))
	var la, lb msg
	for _, m := range m1 {
		if *m.Group == "a" {
			la = m
		} else {
			lb = m
		}
	}
	require.Equal(t, 1, b.qNack(t, A, lb.LeaseID, []int64{lb.MessageID}, ptr("0"), "x"))
	b.qWaitExpired(t, la.LeaseID)
	m2 := b.read(t, B, "r3.dl", nil, "B", 10, "300 milliseconds")
	require.Equal(t, []int64{1, 1}, r3Seqs(t, m2), "attempt 2 of both 1s")
	for _, m := range m2 {
		require.Equal(t, int32(2), m.Attempt)
		if *m.Group == "b" {
			require.Equal(t, 1, b.qNack(t, B, m.LeaseID, []int64{m.MessageID}, ptr("0"), "y"))
		}
	}
	b.qWaitExpired(t, m2[0].LeaseID)
	seen := map[string][]int64{}
	for i := 0; i < 6; i++ {
		ms := b.read(t, A, "r3.dl", nil, "A", 10, "1 minute")
		for _, m := range ms {
			seen[*m.Group] = append(seen[*m.Group], r3Seq(t, m))
		}
		if len(ms) > 0 {
			b.ack(t, A, ms[0].LeaseID, nil)
		}
	}
	require.Equal(t, []int64{2, 3}, seen["a"], "a: 2 once after 1 dead by expiry")
	require.Equal(t, []int64{2, 3}, seen["b"], "b: 2 once after 1 dead by nack")
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout.dead_letter`))
}

// S4. Ack of n inside a business transaction that rolls back: n+1 must not
// be released. S5. Ack still open while another member reads.
func TestSequenceEdgeAckTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.tx", "sequence_ordering => true")
	A, B := b.Conn(t), b.Conn(t)
	for s := int64(1); s <= 3; s++ {
		b.r3Pub(t, A, "r3.tx", "a", s)
	}
	ma := b.read(t, A, "r3.tx", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, ma))
	tx, err := A.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, tx, ma[0].LeaseID, nil)
	require.Empty(t, b.read(t, B, "r3.tx", nil, "B", 10, "1 minute"), "open ack must not release 2")
	require.NoError(t, tx.Rollback(b.ctx))
	require.Empty(t, b.read(t, B, "r3.tx", nil, "B", 10, "1 minute"), "rolled-back ack must not release 2")
	require.Empty(t, b.read(t, B, "r3.tx", nil, "B", 10, "1 minute"))

	tx, err = A.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, tx, ma[0].LeaseID, nil)
	require.Empty(t, b.read(t, B, "r3.tx", nil, "B", 10, "1 minute"), "still open")
	require.NoError(t, tx.Commit(b.ctx))
	mb := b.read(t, B, "r3.tx", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, mb))
	// Savepoint rollback of the ack of 2 inside a committed transaction.
	tx, err = B.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SAVEPOINT s`)
	require.NoError(t, err)
	b.ack(t, tx, mb[0].LeaseID, nil)
	_, err = tx.Exec(b.ctx, `ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	require.Empty(t, b.read(t, A, "r3.tx", nil, "A", 10, "1 minute"), "savepoint-rolled-back ack must not release 3")
}

// S6. Replay of a message that is waiting for its turn (never handed out):
// it must not go out before its predecessor is acked, and never be held by
// two members under unexpired leases.
func TestSequenceEdgeReplayParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.rp", "sequence_ordering => true")
	A, B, C := b.Conn(t), b.Conn(t), b.Conn(t)
	b.r3Pub(t, A, "r3.rp", "a", 1)
	id2 := b.r3Pub(t, A, "r3.rp", "a", 2)
	ma := b.read(t, A, "r3.rp", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, ma))
	var st string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.message_status('r3.rp', $1)`, id2).Scan(&st))
	require.Equal(t, "waiting", st)
	// Parked behind its predecessor: not handed out yet, so replay refuses it.
	var n int
	err := b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('r3.rp', NULL, ARRAY[$1::bigint])`, id2).Scan(&n)
	requireSQLState(t, err, "PGQ03")
	mb := b.read(t, B, "r3.rp", nil, "B", 10, "1 minute")
	assert.NotContains(t, ids(mb), id2, "sequence 2 handed out while 1 is unacked")
	b.ack(t, A, ma[0].LeaseID, nil)
	mc := b.read(t, C, "r3.rp", nil, "C", 10, "1 minute")
	assert.Contains(t, ids(mc), id2, "2 is released once 1 is acked")
	assert.LessOrEqual(t, b.count(t, `SELECT count(*) FROM fanout.lease l WHERE l.open_count > 0 AND l.expires_at > now()
		AND $1 = ANY(l.msg_ids) AND $1 <> ALL(l.settled) AND $1 <> ALL(l.reclaimed)`, id2), int64(1),
		"two members hold sequence 2 under unexpired leases")
}

// S7. Replay of an acked sequence: re-delivered (documented: without
// ordering), but acking it must not release later sequences early.
func TestSequenceEdgeReplayAcked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.ra", "sequence_ordering => true")
	A, B := b.Conn(t), b.Conn(t)
	id1 := b.r3Pub(t, A, "r3.ra", "a", 1)
	for s := int64(2); s <= 3; s++ {
		b.r3Pub(t, A, "r3.ra", "a", s)
	}
	m := b.read(t, A, "r3.ra", nil, "A", 10, "1 minute")
	b.ack(t, A, m[0].LeaseID, nil)
	m2 := b.read(t, A, "r3.ra", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, m2))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('r3.ra', NULL, ARRAY[$1::bigint])`, id1).Scan(&n))
	require.Equal(t, 1, n)
	mb := b.read(t, B, "r3.ra", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, mb), "replayed 1 only")
	b.ack(t, B, mb[0].LeaseID, nil)
	require.Empty(t, b.read(t, B, "r3.ra", nil, "B", 10, "1 minute"), "3 must wait for 2, not for the replayed 1")
	b.ack(t, A, m2[0].LeaseID, nil)
	require.Equal(t, []int64{3}, r3Seqs(t, b.read(t, B, "r3.ra", nil, "B", 10, "1 minute")))
}

// S8. Two pubsub groups progress independently.
func TestSequenceEdgePubsubGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.ps", "semantics => 'pubsub'", "sequence_ordering => true")
	for _, g := range []string{"g1", "g2"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('r3.ps', $1)`, g)
		require.NoError(t, err)
	}
	A, B := b.Conn(t), b.Conn(t)
	for _, s := range []int64{3, 1, 2} {
		b.r3Pub(t, A, "r3.ps", "a", s)
	}
	g1, g2 := ptr("g1"), ptr("g2")
	var got1 []int64
	for i := 0; i < 3; i++ {
		ms := b.read(t, A, "r3.ps", g1, "A", 10, "1 minute")
		require.Len(t, ms, 1)
		got1 = append(got1, r3Seq(t, ms[0]))
		b.ack(t, A, ms[0].LeaseID, nil)
	}
	require.Equal(t, []int64{1, 2, 3}, got1)
	ms := b.read(t, B, "r3.ps", g2, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, ms), "g2 must start at 1 whatever g1 did")
	require.Empty(t, b.read(t, B, "r3.ps", g2, "B2", 10, "1 minute"))
	b.ack(t, B, ms[0].LeaseID, nil)
	require.Equal(t, []int64{2}, r3Seqs(t, b.read(t, B, "r3.ps", g2, "B", 10, "1 minute")))
}

// S9. publish_batch with shuffled sequences and repeats within one batch.
func TestSequenceEdgeBatchShuffledRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.bat", "sequence_ordering => true")
	got, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('r3.bat',
		ARRAY['{"seq":3,"v":"x"}','{"seq":1}','{"seq":3,"v":"y"}','{"seq":2}','{"seq":1,"v":"z"}','{"seq":1}']::jsonb[],
		message_groups => ARRAY['a','a','a','a','a','b'], sequences => ARRAY[3,1,3,2,1,1]::bigint[])`)
	require.NoError(t, err)
	require.Len(t, got, 6)
	require.Equal(t, got[0], got[2], "repeat of (a,3)")
	require.Equal(t, got[1], got[4], "repeat of (a,1)")
	require.NotEqual(t, got[1], got[5])
	require.Equal(t, int64(4), b.qMessageCount(t, "r3.bat"))
	var v string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT coalesce(payload->>'v','') FROM fanout_data.`+b.table(t, "r3.bat")+` WHERE id = $1`, got[0]).Scan(&v))
	require.Equal(t, "x", v, "the first element wins")
	var seqA []int64
	for i := 0; i < 4; i++ {
		ms := b.read(t, b.Pool, "r3.bat", nil, "c", 10, "1 minute")
		for _, m := range ms {
			if *m.Group == "a" {
				seqA = append(seqA, r3Seq(t, m))
			}
		}
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	require.Equal(t, []int64{1, 2, 3}, seqA)
	// The same batch again: every id returned, nothing inserted.
	again, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('r3.bat',
		ARRAY['{}','{}','{}','{}','{}','{}']::jsonb[],
		message_groups => ARRAY['a','a','a','a','a','b'], sequences => ARRAY[3,1,3,2,1,1]::bigint[])`)
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, int64(4), b.qMessageCount(t, "r3.bat"))
}

// S10. Concurrent batches with the same (aggregate, sequence)s, different
// payloads, random orders: one wins, all get the winner's ids, no deadlock;
// and a holder that rolls back lets a waiter win.
func TestSequenceEdgeConcurrentBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.cb", "sequence_ordering => true")
	const workers = 6
	conns := make([]*pgx.Conn, workers)
	for i := range conns {
		conns[i] = b.Conn(t)
	}
	for round := 0; round < 8; round++ {
		agg := fmt.Sprintf("r%d", round)
		holder := b.Conn(t)
		htx, err := holder.Begin(b.ctx)
		require.NoError(t, err)
		var hid int64
		require.NoError(t, htx.QueryRow(b.ctx, `SELECT fanout.publish('r3.cb', '{"w":"holder"}', message_group => $1, sequence => 3)`, agg).Scan(&hid))
		type res struct {
			w   int
			ids map[int64]int64
			err error
		}
		out := make(chan res, workers)
		for w := 0; w < workers; w++ {
			go func(w int) {
				rng := rand.New(rand.NewSource(int64(round*100 + w)))
				seqs := []int64{1, 2, 3, 4, 5, 2}
				rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
				groups := make([]string, len(seqs))
				payloads := make([]string, len(seqs))
				for i := range seqs {
					groups[i] = agg
					payloads[i] = fmt.Sprintf(`{"w":%d,"s":%d}`, w, seqs[i])
				}
				ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
				defer cancel()
				got, err := rvBatch(ctx, conns[w], `SELECT fanout.publish_batch('r3.cb', $1::jsonb[], message_groups => $2::text[], sequences => $3::bigint[])`,
					payloads, groups, seqs)
				m := map[int64]int64{}
				for i, id := range got {
					if prev, ok := m[seqs[i]]; ok && prev != id {
						err = fmt.Errorf("worker %d: seq %d got two ids", w, seqs[i])
					}
					m[seqs[i]] = id
				}
				out <- res{w, m, err}
			}(w)
		}
		time.Sleep(200 * time.Millisecond)
		if round%2 == 0 {
			require.NoError(t, htx.Commit(b.ctx))
		} else {
			require.NoError(t, htx.Rollback(b.ctx))
		}
		var first map[int64]int64
		for w := 0; w < workers; w++ {
			r := <-out
			require.NoError(t, r.err, "round %d worker %d", round, r.w)
			if first == nil {
				first = r.ids
			}
			require.Equal(t, first, r.ids, "round %d: all callers get the winner's ids", round)
		}
		if round%2 == 0 {
			require.Equal(t, hid, first[3], "holder committed: its id for 3")
		} else {
			require.NotEqual(t, hid, first[3])
		}
		require.Equal(t, int64(5), b.count(t, `SELECT count(*) FROM fanout_data.`+b.table(t, "r3.cb")+` WHERE message_group = $1`, agg))
	}
}

// S11. Sequence 0 / negative / NULL refused; huge values work; a gap at 1.
func TestSequenceEdgeValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.val", "sequence_ordering => true")
	for _, s := range []any{int64(0), int64(-1), nil, int64(-9223372036854775808)} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish('r3.val', '{}', message_group => 'a', sequence => $1::bigint)`, s)
		requireSQLState(t, err, "PGQ03")
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('r3.val', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['a','a'], sequences => ARRAY[1, $1::bigint])`, s)
		requireSQLState(t, err, "PGQ03")
	}
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish('r3.val', '{}', message_group => NULL, sequence => 1)`)
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish('r3.val', '{}', message_group => 'a')`)
	requireSQLState(t, err, "PGQ03")
	require.Zero(t, b.qMessageCount(t, "r3.val"))

	huge := int64(1) << 62
	b.r3Pub(t, b.Pool, "r3.val", "a", huge)
	b.r3Pub(t, b.Pool, "r3.val", "a", 9223372036854775807)
	b.r3Pub(t, b.Pool, "r3.val", "b", 3)
	require.Empty(t, b.read(t, b.Pool, "r3.val", nil, "c", 10, "1 minute"), "nothing at sequence 1")
	require.Equal(t, [][4]int64{{0, 1, huge - 1, 2}, {0, huge + 1, 9223372036854775806, 1}, {0, 1, 2, 1}}, b.r3Gaps(t, "r3.val"))
	b.r3Pub(t, b.Pool, "r3.val", "b", 1)
	m := b.read(t, b.Pool, "r3.val", nil, "c", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, m))
	b.ack(t, b.Pool, m[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "r3.val", nil, "c", 10, "1 minute"), "b:3 waits for b:2")
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._sequence_gap_alerts(now() + interval '1 hour')`).Scan(&n))
	require.Equal(t, int64(3), n)
}

// S12. sequence_gaps over many aggregates; gap_alert_after gives one row per gap.
func TestSequenceEdgeGapsMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.gm", "sequence_ordering => true", "gap_alert_after => '1 minute'")
	const aggs = 60
	var want [][4]int64
	for a := 0; a < aggs; a++ {
		agg := fmt.Sprintf("a%02d", a)
		// a: 1 always, then a+3 and a+5 (gaps 2..a+2 and a+4..a+4)
		b.r3Pub(t, b.Pool, "r3.gm", agg, int64(a+5))
		b.r3Pub(t, b.Pool, "r3.gm", agg, int64(a+3))
		b.r3Pub(t, b.Pool, "r3.gm", agg, 1)
		want = append(want, [4]int64{int64(a), 2, int64(a + 2), 2}, [4]int64{int64(a), int64(a + 4), int64(a + 4), 1})
	}
	var ones []msg
	for {
		ms := b.read(t, b.Pool, "r3.gm", nil, "c", 1000, "1 minute")
		if len(ms) == 0 {
			break
		}
		ones = append(ones, ms...)
	}
	require.Len(t, ones, aggs)
	// While 1 is in flight it is not missing.
	require.Equal(t, want, b.r3Gaps(t, "r3.gm"))
	b.ack(t, b.Pool, ones[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "r3.gm", nil, "c", 1000, "1 minute"))
	require.Equal(t, want, b.r3Gaps(t, "r3.gm"))
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._sequence_gap_alerts(now())`).Scan(&n))
	require.Zero(t, n, "younger than gap_alert_after")
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._sequence_gap_alerts(now() + interval '2 minutes')`).Scan(&n))
	require.Equal(t, int64(2*aggs), n)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._sequence_gap_alerts(now() + interval '3 minutes')`).Scan(&n))
	require.Zero(t, n, "once per gap")
	require.Equal(t, int64(2*aggs), b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'sequence_gap'`))
}

// S13. A missing sequence published by a transaction that rolls back must
// not close the gap.
func TestSequenceEdgeGapRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.gr", "sequence_ordering => true")
	A, B := b.Conn(t), b.Conn(t)
	b.r3Pub(t, A, "r3.gr", "a0", 2)
	require.Empty(t, b.read(t, B, "r3.gr", nil, "B", 10, "1 minute"))
	require.Equal(t, [][4]int64{{0, 1, 1, 1}}, b.r3Gaps(t, "r3.gr"))
	tx, err := A.Begin(b.ctx)
	require.NoError(t, err)
	id1 := b.r3Pub(t, tx, "r3.gr", "a0", 1)
	require.Empty(t, b.read(t, B, "r3.gr", nil, "B", 10, "1 minute"))
	require.Equal(t, [][4]int64{{0, 1, 1, 1}}, b.r3Gaps(t, "r3.gr"), "open publish")
	require.NoError(t, tx.Rollback(b.ctx))
	require.Empty(t, b.read(t, B, "r3.gr", nil, "B", 10, "1 minute"))
	require.Equal(t, [][4]int64{{0, 1, 1, 1}}, b.r3Gaps(t, "r3.gr"), "rolled back")
	id1b := b.r3Pub(t, A, "r3.gr", "a0", 1)
	require.NotEqual(t, id1, id1b, "the rolled-back id is not returned")
	m := b.read(t, B, "r3.gr", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, m))
	b.ack(t, B, m[0].LeaseID, nil)
	require.Equal(t, []int64{2}, r3Seqs(t, b.read(t, B, "r3.gr", nil, "B", 10, "1 minute")))
	require.Empty(t, b.r3Gaps(t, "r3.gr"))
}

// S14. A pubsub group that dies and is resurrected keeps its seq_state,
// including an ack committed before it died and not yet applied.
func TestSequenceEdgeDeadResurrect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.dead", "semantics => 'pubsub'", "sequence_ordering => true")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('r3.dead', 'g', heartbeat_timeout => '1 second', dead_after_misses => 1)`)
	require.NoError(t, err)
	g := ptr("g")
	b.r3Pub(t, b.Pool, "r3.dead", "a", 1)
	b.r3Pub(t, b.Pool, "r3.dead", "a", 2)
	m := b.read(t, b.Pool, "r3.dead", g, "c", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, m))
	b.ack(t, b.Pool, m[0].LeaseID, nil) // applied by the next read only
	for i := 0; i < 5; i++ {
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout._detect_dead_groups(now() + interval '1 hour')`)
		require.NoError(t, err)
	}
	var st string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.consumer_group WHERE group_name = 'g'`).Scan(&st))
	require.Equal(t, "dead", st)
	m = b.read(t, b.Pool, "r3.dead", g, "c", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, m), "resurrected group: 2 after the acked 1")
	b.ack(t, b.Pool, m[0].LeaseID, nil)
	b.r3Pub(t, b.Pool, "r3.dead", "a", 3)
	require.Equal(t, []int64{3}, r3Seqs(t, b.read(t, b.Pool, "r3.dead", g, "c", 10, "1 minute")))
}

// S15. seek after a committed ack that no read applied yet: the ack must
// count ("seek keeps each aggregate's progress"). Compare with the same
// steps plus one empty read between ack and seek.
func TestSequenceEdgeSeekAfterUnappliedAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, withRead := range []bool{true, false} {
		topic := fmt.Sprintf("r3.seek.%v", withRead)
		b.createTopic(t, b.Pool, topic, "sequence_ordering => true")
		b.r3Pub(t, b.Pool, topic, "a", 1)
		m := b.read(t, b.Pool, topic, nil, "c", 10, "1 minute")
		require.Equal(t, []int64{1}, r3Seqs(t, m))
		b.ack(t, b.Pool, m[0].LeaseID, nil) // committed
		if withRead {
			require.Empty(t, b.read(t, b.Pool, topic, nil, "c", 10, "1 minute"))
		}
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.seek($1, NULL, 'latest')`, topic)
		require.NoError(t, err)
		b.r3Pub(t, b.Pool, topic, "a", 2)
		got := b.read(t, b.Pool, topic, nil, "c", 10, "1 minute")
		require.Equal(t, []int64{2}, r3Seqs(t, got),
			"withRead=%v: 1 was acked and committed before seek; 2 must be handed out", withRead)
	}
}

// S16. Scripted: producers committing out of order, 4 members of one group.
func TestSequenceEdgeScriptedMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.sm", "sequence_ordering => true")
	P1, P2, P3 := b.Conn(t), b.Conn(t), b.Conn(t)
	M := []*pgx.Conn{b.Conn(t), b.Conn(t), b.Conn(t), b.Conn(t)}
	t1, err := P1.Begin(b.ctx)
	require.NoError(t, err)
	b.r3Pub(t, t1, "r3.sm", "a", 3)
	t2, err := P2.Begin(b.ctx)
	require.NoError(t, err)
	b.r3Pub(t, t2, "r3.sm", "a", 1)
	b.r3Pub(t, P3, "r3.sm", "a", 2)
	b.r3Pub(t, P3, "r3.sm", "a", 4)
	readAll := func() [][]msg {
		out := make([][]msg, len(M))
		for i, c := range M {
			out[i] = b.read(t, c, "r3.sm", nil, fmt.Sprintf("m%d", i), 10, "1 minute")
		}
		return out
	}
	flat := func(x [][]msg) []int64 {
		var s []int64
		for _, ms := range x {
			s = append(s, r3Seqs(t, ms)...)
		}
		return s
	}
	require.Empty(t, flat(readAll()))
	require.NoError(t, t1.Commit(b.ctx))
	require.Empty(t, flat(readAll()))
	require.NoError(t, t2.Commit(b.ctx))
	r := readAll()
	require.Equal(t, []int64{1}, flat(r))
	for want := int64(2); want <= 4; want++ {
		var held msg
		var who int
		for i, ms := range r {
			if len(ms) > 0 {
				held, who = ms[0], i
			}
		}
		b.ack(t, M[who], held.LeaseID, nil)
		r = readAll()
		require.Equal(t, []int64{want}, flat(r))
	}
}

// S17. Chaos: 4 members, 2 producers committing shuffled sequences out of
// order, random ack / nack / let-expire; a message must never be handed
// out while a lower sequence of its aggregate is neither acked (or being
// acked) nor dead-lettered.
func TestSequenceEdgeChaos(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.ch", "sequence_ordering => true", "max_attempts => 1000")
	const aggs, per = 20, 12
	type item struct {
		agg string
		seq int64
	}
	var items []item
	for a := 0; a < aggs; a++ {
		for s := 1; s <= per; s++ {
			items = append(items, item{fmt.Sprintf("x%d", a), int64(s)})
		}
	}
	rand.New(rand.NewSource(3)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]map[int64]bool{} // acked or ack in flight
	done := 0
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			conn := b.Conn(t)
			for i := p * 5; i < len(items); i += 10 {
				tx, err := conn.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, it := range items[i:min(i+5, len(items))] {
					if _, err := tx.Exec(ctx, `SELECT fanout.publish('r3.ch', $1::jsonb, message_group => $2, sequence => $3)`,
						fmt.Sprintf(`{"seq":%d}`, it.seq), it.agg, it.seq); err != nil {
						errs <- err
						return
					}
				}
				time.Sleep(time.Duration(rand.Intn(5)) * time.Millisecond)
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(p)
	}
	for m := 0; m < 4; m++ {
		wg.Add(1)
		go func(m int) {
			defer wg.Done()
			conn := b.Conn(t)
			rng := rand.New(rand.NewSource(int64(m)))
			for {
				mu.Lock()
				fin := done == aggs*per
				mu.Unlock()
				if fin || ctx.Err() != nil {
					return
				}
				// (2 s: a member acks its page's messages one by one after
				// marking them acked here; a lease that ran out between the
				// mark and the ack on a loaded machine would let another
				// member take the page, which the check below reads as an
				// acked message handed out again.)
				ms, err := readMsgs(ctx, conn, "r3.ch", nil, fmt.Sprintf("m%d", m), 3, "2 seconds")
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					time.Sleep(3 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, msg := range ms {
					var body struct{ Seq int64 }
					_ = json.Unmarshal(msg.Payload, &body)
					g := *msg.Group
					if acked[g] == nil {
						acked[g] = map[int64]bool{}
					}
					for s := int64(1); s < body.Seq; s++ {
						if !acked[g][s] {
							mu.Unlock()
							errs <- fmt.Errorf("%s: sequence %d handed out (attempt %d) while %d not acked", g, body.Seq, msg.Attempt, s)
							cancel()
							return
						}
					}
					if acked[g][body.Seq] {
						mu.Unlock()
						errs <- fmt.Errorf("%s: acked sequence %d handed out again", g, body.Seq)
						cancel()
						return
					}
				}
				mu.Unlock()
				for _, msg := range ms {
					var body struct{ Seq int64 }
					_ = json.Unmarshal(msg.Payload, &body)
					g := *msg.Group
					switch rng.Intn(6) {
					case 0: // let it expire
						continue
					case 1:
						if _, err := conn.Exec(ctx, `SELECT fanout.nack($1, $2, '0', 'x')`, msg.LeaseID, []int64{msg.MessageID}); err != nil && qState(err) != "PGQ11" {
							errs <- err
							return
						}
					default:
						mu.Lock()
						acked[g][body.Seq] = true
						mu.Unlock()
						_, err := conn.Exec(ctx, `SELECT fanout.ack($1, $2)`, msg.LeaseID, []int64{msg.MessageID})
						mu.Lock()
						if err != nil {
							acked[g][body.Seq] = false
							if qState(err) != "PGQ11" {
								mu.Unlock()
								errs <- err
								return
							}
						} else {
							done++
						}
						mu.Unlock()
					}
				}
			}
		}(m)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, aggs*per, done)
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_wait`))
}

// S15b. The same with the ack still open when seek is called: seek waits
// for the acking transaction, which then commits.
func TestSequenceEdgeSeekDuringOpenAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.seek2", "sequence_ordering => true")
	A, S := b.Conn(t), b.Conn(t)
	b.r3Pub(t, A, "r3.seek2", "a", 1)
	m := b.read(t, A, "r3.seek2", nil, "c", 10, "1 minute")
	tx, err := A.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, tx, m[0].LeaseID, nil)
	done := make(chan error, 1)
	go func() {
		_, err := S.Exec(b.ctx, `SELECT fanout.seek('r3.seek2', NULL, 'latest')`)
		done <- err
	}()
	b.tWaitBlocked(t, S) // on the lease row the open ack holds
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	b.r3Pub(t, b.Pool, "r3.seek2", "a", 2)
	assert.Equal(t, []int64{2}, r3Seqs(t, b.read(t, b.Pool, "r3.seek2", nil, "c", 10, "1 minute")),
		"1 acked (committed) before seek returned; 2 must be handed out")
	var next int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT next_seq FROM fanout.seq_state WHERE message_group = 'a'`).Scan(&next))
	assert.Equal(t, int64(2), next, "seq_state forgot the committed ack of 1")
}

// S18. replay_dead_letters of a dead-lettered n while n+1 is in flight:
// re-delivered without ordering (documented); its ack must not release n+2
// before n+1 is acked.
func TestSequenceEdgeReplayDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "r3.rdl", "sequence_ordering => true", "max_attempts => 1")
	A, B := b.Conn(t), b.Conn(t)
	id1 := b.r3Pub(t, A, "r3.rdl", "a", 1)
	b.r3Pub(t, A, "r3.rdl", "a", 2)
	b.r3Pub(t, A, "r3.rdl", "a", 3)
	m := b.read(t, A, "r3.rdl", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, m))
	b.qNack(t, A, m[0].LeaseID, nil, ptr("0"), "dead")
	m2 := b.read(t, A, "r3.rdl", nil, "A", 10, "1 minute")
	require.Equal(t, []int64{2}, r3Seqs(t, m2))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay_dead_letters('r3.rdl', NULL, ARRAY[$1::bigint])`, id1).Scan(&n))
	require.Equal(t, 1, n)
	mb := b.read(t, B, "r3.rdl", nil, "B", 10, "1 minute")
	require.Equal(t, []int64{1}, r3Seqs(t, mb))
	b.ack(t, B, mb[0].LeaseID, nil)
	require.Empty(t, b.read(t, B, "r3.rdl", nil, "B", 10, "1 minute"), "3 waits for 2")
	b.ack(t, A, m2[0].LeaseID, nil)
	require.Equal(t, []int64{3}, r3Seqs(t, b.read(t, B, "r3.rdl", nil, "B", 10, "1 minute")))
}
