package tests

// Edge cases around three fixes: fanout._publish_sequenced (sequenced
// publish_batch), fanout._release_holds + fanout.replay on sequence-ordered
// topics, fanout._kpart_read (expired page + due retries, whole_transactions
// over retries). Scripted interleavings on real connections.

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// ---------- 1. _publish_sequenced ----------

type rfEl struct {
	key *string
	g   string
	s   int64
}

func rfBatch(ctx context.Context, q querier, topic string, els []rfEl) ([]int64, error) {
	keys := make([]*string, len(els))
	gs := make([]string, len(els))
	ss := make([]int64, len(els))
	for i, e := range els {
		keys[i], gs[i], ss[i] = e.key, e.g, e.s
	}
	return rvBatch(ctx, q, `SELECT fanout.publish_batch($1,
		ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, cardinality($3::text[])) g ORDER BY g),
		message_groups => $3::text[], dedupe_keys => $2::text[], sequences => $4::bigint[])`, topic, keys, gs, ss)
}

func rfOne(ctx context.Context, q querier, topic string, e rfEl) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `SELECT fanout.publish($1, '{}', message_group => $2, sequence => $3, dedupe_key => $4)`,
		topic, e.g, e.s, e.key).Scan(&id)
	return id, err
}

// rfModel is the old element-by-element semantics: key first (taken: the
// key's message), then the pair (taken: its message, and the key points
// there), else a new message.
type rfModel struct {
	keys  map[string]int64
	pairs map[string]int64
}

func newRfModel() *rfModel { return &rfModel{keys: map[string]int64{}, pairs: map[string]int64{}} }

// check verifies got against the model and updates the model with got.
func (m *rfModel) check(t *testing.T, els []rfEl, got []int64) {
	t.Helper()
	require.Len(t, got, len(els))
	existing := map[int64]bool{}
	for _, v := range m.pairs {
		existing[v] = true
	}
	var lastNew int64
	for i, e := range els {
		pk := fmt.Sprintf("%s/%d", e.g, e.s)
		if e.key != nil {
			if v, ok := m.keys[*e.key]; ok {
				require.Equal(t, v, got[i], "element %d: key %s taken -> its message", i, *e.key)
				continue
			}
		}
		if v, ok := m.pairs[pk]; ok {
			require.Equal(t, v, got[i], "element %d: pair %s taken -> its message", i, pk)
			if e.key != nil {
				m.keys[*e.key] = v
			}
			continue
		}
		require.False(t, existing[got[i]], "element %d: must be a new message", i)
		require.Greater(t, got[i], lastNew, "element %d: new ids in input order", i)
		lastNew = got[i]
		existing[got[i]] = true
		m.pairs[pk] = got[i]
		if e.key != nil {
			m.keys[*e.key] = got[i]
		}
	}
}

// db verifies the tables against the model.
func (m *rfModel) db(t *testing.T, b *bundle, topic string) {
	t.Helper()
	require.Equal(t, int64(len(m.pairs)), b.qMessageCount(t, topic), "exactly one message per pair")
	tbl := pgx.Identifier{b.table(t, topic)}.Sanitize()
	rows, err := b.Pool.Query(b.ctx, `SELECT sp.message_group || '/' || sp.seq, sp.message_id,
		(SELECT count(*) FROM fanout_data.`+tbl+` x WHERE x.id = sp.message_id AND x.message_group = sp.message_group AND x.seq = sp.seq)
		FROM fanout.seq_published sp JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1`, topic)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var pk string
		var id, c int64
		require.NoError(t, rows.Scan(&pk, &id, &c))
		require.Equal(t, m.pairs[pk], id, "seq_published %s", pk)
		require.Equal(t, int64(1), c, "message %d holds pair %s", id, pk)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(m.pairs), n)
	rows, err = b.Pool.Query(b.ctx, `SELECT d.dedupe_key, d.message_id FROM `+b.dedupeTable(t, topic)+` d`)
	require.NoError(t, err)
	n = 0
	for rows.Next() {
		var k string
		var id int64
		require.NoError(t, rows.Scan(&k, &id))
		require.Equal(t, m.keys[k], id, "dedupe row of %s must point at the message holding its pair", k)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(m.keys), n)
}

func k(s string) *string { return &s }

// P1. The hand-made intra-batch cases, then later publishes of the keys.
func TestFixesEdgePubIntraBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.p1", "sequence_ordering => true")
	m := newRfModel()
	// pre-existing: pair g/5 without key, key X with g/6
	pre := []rfEl{{nil, "g", 5}, {k("X"), "g", 6}}
	got, err := rfBatch(b.ctx, b.Pool, "rf.p1", pre)
	require.NoError(t, err)
	m.check(t, pre, got)
	els := []rfEl{
		{k("A"), "g", 1}, // new
		{k("B"), "g", 1}, // key new, pair taken by earlier element (other key) -> A's
		{k("A"), "g", 2}, // key taken, pair new -> A's; g/2 NOT claimed
		{nil, "g", 2},    // pair new -> new
		{nil, "g", 1},    // -> A's
		{k("C"), "g", 3}, // new
		{k("C"), "g", 3}, // -> C's
		{k("D"), "g", 2}, // key new, pair taken by element 3 -> it
		{k("E"), "g", 5}, // key new, pair taken by a previous publish
		{k("X"), "g", 7}, // key taken by a previous publish, pair new: not claimed
		{k("F"), "h", 1}, // new
		{k("B"), "h", 2}, // repeat of B -> A's message
		{k("Z"), "h", 1}, // key new, pair taken (F) -> F's
		{k("a"), "h", 1}, // the same, a key sorting after Z
		{nil, "g", 7},    // pair g/7 new (X's element did not claim it)
	}
	got, err = rfBatch(b.ctx, b.Pool, "rf.p1", els)
	require.NoError(t, err)
	m.check(t, els, got)
	m.db(t, b, "rf.p1")
	// Later single publishes of those keys return the message their dedupe row names.
	for _, key := range []string{"A", "B", "D", "E", "X", "Z", "a"} {
		id, err := rfOne(b.ctx, b.Pool, "rf.p1", rfEl{k(key), "q", 100})
		require.NoError(t, err)
		require.Equal(t, m.keys[key], id, "later publish of key %s", key)
	}
	// and a batch of them
	later := []rfEl{{k("B"), "q", 1}, {k("Z"), "q", 2}, {k("D"), "q", 3}}
	got, err = rfBatch(b.ctx, b.Pool, "rf.p1", later)
	require.NoError(t, err)
	m.check(t, later, got)
	m.db(t, b, "rf.p1")
}

// P2. dedupe_window expiry takeover (row aged by hand).
func TestFixesEdgePubWindowTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.w", "sequence_ordering => true")
	m := newRfModel()
	first := []rfEl{{k("A"), "g", 1}, {k("B"), "g", 2}, {k("C"), "g", 3}}
	got, err := rfBatch(b.ctx, b.Pool, "rf.w", first)
	require.NoError(t, err)
	m.check(t, first, got)
	_, err = b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, "rf.w")+` SET created_at = created_at - interval '100 days'`)
	require.NoError(t, err)
	// expired keys are free again: the model forgets them
	delete(m.keys, "A")
	delete(m.keys, "B")
	delete(m.keys, "C")
	els := []rfEl{
		{k("A"), "g", 1},  // taken over; pair still held by the old message -> old message
		{k("A"), "g", 10}, // repeat -> that
		{k("B"), "g", 11}, // taken over, new pair -> new message
		{k("C"), "g", 1},  // taken over, pair held -> old A message
		{nil, "g", 10},    // g/10 was not claimed by the repeat of A -> new
	}
	got, err = rfBatch(b.ctx, b.Pool, "rf.w", els)
	require.NoError(t, err)
	m.check(t, els, got)
	m.db(t, b, "rf.w")
	id, err := rfOne(b.ctx, b.Pool, "rf.w", rfEl{k("B"), "z", 1})
	require.NoError(t, err)
	require.Equal(t, m.keys["B"], id)
}

// P3. Random batches against the model, incl. one of 10,000 elements.
func TestFixesEdgePubRandomModel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.r", "sequence_ordering => true")
	m := newRfModel()
	rng := rand.New(rand.NewSource(7))
	mk := func(n, keys, pairs int) []rfEl {
		out := make([]rfEl, n)
		for i := range out {
			var kk *string
			if rng.Intn(10) >= 3 {
				kk = k(fmt.Sprintf("k%d", rng.Intn(keys)))
			}
			out[i] = rfEl{kk, fmt.Sprintf("g%d", rng.Intn(3)), int64(1 + rng.Intn(pairs))}
		}
		return out
	}
	for round := 0; round < 30; round++ {
		els := mk(1+rng.Intn(40), 25, 15)
		got, err := rfBatch(b.ctx, b.Pool, "rf.r", els)
		require.NoError(t, err)
		m.check(t, els, got)
	}
	m.db(t, b, "rf.r")
	els := mk(10000, 4000, 2500)
	got, err := rfBatch(b.ctx, b.Pool, "rf.r", els)
	require.NoError(t, err)
	m.check(t, els, got)
	m.db(t, b, "rf.r")
}

// P4. Scripted: a holder with a key in an open transaction; batch B blocks
// on it in the middle of its keys; batch C wants B's first and last keys (the
// old element-by-element path deadlocked here). Commit and rollback.
func TestFixesEdgePubScriptedHolder(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			b := setup(t)
			b.createTopic(t, b.Pool, "rf.h", "sequence_ordering => true")
			H, B, C := b.Conn(t), b.Conn(t), b.Conn(t)
			tx, err := H.Begin(b.ctx)
			require.NoError(t, err)
			hm, err := rfOne(b.ctx, tx, "rf.h", rfEl{k("m"), "g", 100})
			require.NoError(t, err)
			hp, err := rfOne(b.ctx, tx, "rf.h", rfEl{nil, "g", 50}) // a pair held too
			require.NoError(t, err)
			var bres, cres []int64
			bch := rwAsync(func() error {
				var e error
				bres, e = rfBatch(b.ctx, B, "rf.h", []rfEl{{k("z"), "g", 1}, {k("m"), "g", 2}, {k("a"), "g", 3}, {k("n"), "g", 50}})
				return e
			})
			b.tWaitBlocked(t, B)
			cch := rwAsync(func() error {
				var e error
				cres, e = rfBatch(b.ctx, C, "rf.h", []rfEl{{k("a"), "g", 4}, {nil, "g", 50}, {k("z"), "g", 5}, {k("y"), "g", 2}})
				return e
			})
			b.tWaitBlocked(t, C)
			if commit {
				require.NoError(t, tx.Commit(b.ctx))
			} else {
				require.NoError(t, tx.Rollback(b.ctx))
			}
			e1, ok1 := rwWithin(bch, 20*time.Second)
			e2, ok2 := rwWithin(cch, 20*time.Second)
			require.True(t, ok1 && ok2, "both batches finish")
			require.NoError(t, e1, "no 40P01")
			require.NoError(t, e2, "no 40P01")
			if commit {
				require.Equal(t, hm, bres[1], "key m: the holder's message")
				require.Equal(t, hp, bres[3], "key n new, pair g/50 held by the holder: its message")
				require.Equal(t, hp, cres[1])
			} else {
				require.NotEqual(t, hm, bres[1])
				require.Equal(t, bres[3], cres[1], "g/50: B's message")
			}
			require.Equal(t, bres[2], cres[0], "key a: B's")
			require.Equal(t, bres[0], cres[2], "key z: B's")
			if commit {
				// B's element {m, g/2} found m taken: it did not claim g/2, so y's element did
				require.NotContains(t, append(append([]int64{}, bres...), hm, hp), cres[3], "y: a new message")
			} else {
				require.Equal(t, bres[1], cres[3], "key y new, pair g/2 B's -> B's message")
			}
			var dn int64
			require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT message_id FROM `+b.dedupeTable(t, "rf.h")+` WHERE dedupe_key = 'n'`).Scan(&dn))
			require.Equal(t, bres[3], dn, "dedupe n -> holder of g/50")
			require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT message_id FROM `+b.dedupeTable(t, "rf.h")+` WHERE dedupe_key = 'y'`).Scan(&dn))
			require.Equal(t, cres[3], dn, "dedupe y -> holder of g/2")
			require.Equal(t, b.count(t, `SELECT count(*) FROM fanout.seq_published`), b.qMessageCount(t, "rf.h"))
		})
	}
}

// P5. Concurrent batches and single publishes over a small key/pair space,
// in random orders: no error at all (READ COMMITTED), every keyed element
// gets its key's final message, every unkeyed one its pair's, one message
// per pair.
func TestFixesEdgePubConcurrentRandom(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.c", "sequence_ordering => true")
	type res struct {
		els []rfEl
		ids []int64
	}
	var mu sync.Mutex
	var all []res
	var errs []error
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := b.Conn(t)
			rng := rand.New(rand.NewSource(int64(w)))
			for it := 0; it < 60; it++ {
				n := 1 + rng.Intn(12)
				els := make([]rfEl, n)
				for i := range els {
					var kk *string
					if rng.Intn(4) > 0 {
						kk = k(fmt.Sprintf("k%02d", rng.Intn(30)))
					}
					els[i] = rfEl{kk, fmt.Sprintf("g%d", rng.Intn(2)), int64(1 + rng.Intn(20))}
				}
				var ids []int64
				var err error
				if n == 1 || rng.Intn(4) == 0 {
					// single publishes in one transaction of one element, or a batch
					var id int64
					id, err = rfOne(b.ctx, conn, "rf.c", els[0])
					els = els[:1]
					ids = []int64{id}
				} else {
					ids, err = rfBatch(b.ctx, conn, "rf.c", els)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					all = append(all, res{els, ids})
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	for _, e := range errs {
		t.Errorf("publish failed: %v (state %s)", e, pgState(e))
	}
	keys := map[string]int64{}
	rows, err := b.Pool.Query(b.ctx, `SELECT dedupe_key, message_id FROM `+b.dedupeTable(t, "rf.c"))
	require.NoError(t, err)
	for rows.Next() {
		var kk string
		var id int64
		require.NoError(t, rows.Scan(&kk, &id))
		keys[kk] = id
	}
	pairs := map[string]int64{}
	rows, err = b.Pool.Query(b.ctx, `SELECT message_group || '/' || seq, message_id FROM fanout.seq_published`)
	require.NoError(t, err)
	for rows.Next() {
		var kk string
		var id int64
		require.NoError(t, rows.Scan(&kk, &id))
		pairs[kk] = id
	}
	require.Equal(t, int64(len(pairs)), b.qMessageCount(t, "rf.c"), "one message per pair")
	tbl := pgx.Identifier{b.table(t, "rf.c")}.Sanitize()
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rf.c")+` d WHERE NOT EXISTS (SELECT 1 FROM fanout_data.`+tbl+` m WHERE m.id = d.message_id)`),
		"a dedupe row names a message that does not exist")
	bad := 0
	for _, r := range all {
		for i, e := range r.els {
			var want int64
			if e.key != nil {
				want = keys[*e.key]
			} else {
				want = pairs[fmt.Sprintf("%s/%d", e.g, e.s)]
			}
			if want != r.ids[i] && bad < 10 {
				bad++
				t.Errorf("element %+v (key %v) got %d, want %d", e, e.key != nil, r.ids[i], want)
			}
		}
	}
}

// P6. REPEATABLE READ callers: 40001 allowed, never a wrong id or a duplicate.
func TestFixesEdgePubRepeatableRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.rr", "sequence_ordering => true")
	type tc struct {
		name   string
		holder []rfEl
		caller []rfEl
		commit bool
		block  bool // holder still open when the caller runs
	}
	cases := []tc{
		{"key committed after snapshot", []rfEl{{k("K1"), "g", 1}}, []rfEl{{k("K1"), "g", 2}}, true, false},
		{"pair committed after snapshot, key new", []rfEl{{nil, "g", 11}}, []rfEl{{k("K2"), "g", 11}}, true, false},
		{"key held then committed", []rfEl{{k("K3"), "g", 21}}, []rfEl{{k("K3"), "g", 22}}, true, true},
		{"pair held then committed", []rfEl{{k("K4x"), "g", 31}}, []rfEl{{k("K4"), "g", 31}, {nil, "g", 31}}, true, true},
		{"key held then rolled back", []rfEl{{k("K5"), "g", 41}}, []rfEl{{k("K5"), "g", 42}}, false, true},
		{"pair held then rolled back", []rfEl{{nil, "g", 51}}, []rfEl{{k("K6"), "g", 51}}, false, true},
	}
	for _, c := range cases {
		H, R := b.Conn(t), b.Conn(t)
		rtx, err := R.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = rtx.Exec(b.ctx, `SELECT 1`) // snapshot
		require.NoError(t, err)
		htx, err := H.Begin(b.ctx)
		require.NoError(t, err)
		hids, err := rfBatch(b.ctx, htx, "rf.rr", c.holder)
		require.NoError(t, err)
		var got []int64
		var rerr error
		if c.block {
			ch := rwAsync(func() error { var e error; got, e = rfBatch(b.ctx, rtx, "rf.rr", c.caller); return e })
			b.tWaitBlocked(t, R)
			if c.commit {
				require.NoError(t, htx.Commit(b.ctx))
			} else {
				require.NoError(t, htx.Rollback(b.ctx))
			}
			rerr = <-ch
		} else {
			require.NoError(t, htx.Commit(b.ctx))
			got, rerr = rfBatch(b.ctx, rtx, "rf.rr", c.caller)
		}
		if rerr != nil {
			require.Equal(t, "40001", pgState(rerr), "%s: %v", c.name, rerr)
			_ = rtx.Rollback(b.ctx)
			continue
		}
		require.NoError(t, rtx.Commit(b.ctx), c.name)
		if c.commit {
			require.Equal(t, hids[0], got[0], "%s: the holder's id", c.name)
		} else {
			require.NotEqual(t, hids[0], got[0], c.name)
		}
		t.Logf("%s: no 40001, ids %v", c.name, got)
	}
	require.Equal(t, b.count(t, `SELECT count(*) FROM fanout.seq_published`), b.qMessageCount(t, "rf.rr"))
	tbl := pgx.Identifier{b.table(t, "rf.rr")}.Sanitize()
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rf.rr")+` d WHERE NOT EXISTS (SELECT 1 FROM fanout_data.`+tbl+` m WHERE m.id = d.message_id)`))
}

// ---------- 2. _release_holds / replay ----------

func (b *bundle) rfNext(t *testing.T, topic, agg string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT s.next_seq FROM fanout.seq_state s JOIN fanout.consumer_group g USING (group_id)
		JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1 AND s.message_group = $2`, topic, agg).Scan(&n))
	return n
}

// S1. seek with, across five aggregates: a committed unapplied ack (a), a
// dead letter by nack at max_attempts (b), an unsettled message (c), an ack
// in an open transaction that commits while seek waits (d), one that rolls
// back (e). Then the aggregates' next sequences.
func TestFixesEdgeSeqSeekSeveralAggregates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.s", "sequence_ordering => true", "max_attempts => 1")
	A, D, E, S := b.Conn(t), b.Conn(t), b.Conn(t), b.Conn(t)
	aggs := []string{"a", "b", "c", "d", "e"}
	for _, g := range aggs {
		b.r3Pub(t, A, "rf.s", g, 1)
	}
	for _, g := range aggs {
		b.r3Pub(t, A, "rf.s", g, 2) // parked
	}
	byAgg := map[string]msg{}
	for i := 0; i < 5; i++ { // one page per aggregate (separate leases)
		ms := b.read(t, A, "rf.s", nil, "A", 1, "1 hour")
		require.Len(t, ms, 1)
		require.Equal(t, int64(1), r3Seq(t, ms[0]))
		byAgg[*ms[0].Group] = ms[0]
	}
	require.Len(t, byAgg, 5)
	b.ack(t, A, byAgg["a"].LeaseID, nil)
	b.qNack(t, A, byAgg["b"].LeaseID, nil, ptr("0"), "dead")
	dtx, err := D.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, dtx, byAgg["d"].LeaseID, nil)
	etx, err := E.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, etx, byAgg["e"].LeaseID, nil)
	done := rwAsync(func() error { _, e := S.Exec(b.ctx, `SELECT fanout.seek('rf.s', NULL, 'latest')`); return e })
	b.tWaitBlocked(t, S)
	require.NoError(t, dtx.Commit(b.ctx))
	// S may now wait for E's lease
	require.NoError(t, etx.Rollback(b.ctx))
	require.NoError(t, <-done)
	want := map[string]int64{"a": 2, "b": 2, "c": 1, "d": 2, "e": 1}
	for _, g := range aggs {
		require.Equal(t, want[g], b.rfNext(t, "rf.s", g), "aggregate %s next_seq after seek", g)
	}
	_, err = A.Exec(b.ctx, `SELECT fanout.ack($1)`, byAgg["e"].LeaseID)
	require.Equal(t, "PGQ11", pgState(err), "e's holder fenced after seek")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_done`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_wait`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.retry`))
	// new messages at each aggregate's next sequence come; others wait
	for _, g := range aggs {
		b.r3Pub(t, A, "rf.s", g, want[g]+10) // a gap for everyone: parked
	}
	for _, g := range []string{"a", "b", "d"} {
		b.r3Pub(t, A, "rf.s", g, 3)
	}
	got := map[string][]int64{}
	for i := 0; i < 10; i++ {
		ms := b.read(t, A, "rf.s", nil, "A", 100, "1 hour")
		for _, m := range ms {
			got[*m.Group] = append(got[*m.Group], r3Seq(t, m))
		}
		if len(ms) == 0 {
			break
		}
	}
	require.Empty(t, got, "after seek latest, 2 was skipped for a, b, d: 3 waits for 2 (documented skip)")
}

// S1b. Same but seek 'earliest': a, b, d must not be handed 1 as their
// current message again nor lose 2.
func TestFixesEdgeSeqSeekEarliestAfterUnapplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.se", "sequence_ordering => true", "max_attempts => 1")
	A := b.Conn(t)
	for _, g := range []string{"a", "b", "c"} {
		b.r3Pub(t, A, "rf.se", g, 1)
	}
	for _, g := range []string{"a", "b", "c"} {
		b.r3Pub(t, A, "rf.se", g, 2)
	}
	by := map[string]msg{}
	for i := 0; i < 3; i++ {
		ms := b.read(t, A, "rf.se", nil, "A", 1, "1 hour")
		require.Len(t, ms, 1)
		by[*ms[0].Group] = ms[0]
	}
	b.ack(t, A, by["a"].LeaseID, nil)
	b.qNack(t, A, by["b"].LeaseID, nil, ptr("0"), "dead")
	_, err := A.Exec(b.ctx, `SELECT fanout.seek('rf.se', NULL, 'earliest')`)
	require.NoError(t, err)
	got := map[string][]int64{}
	for i := 0; i < 10; i++ {
		ms := b.read(t, A, "rf.se", nil, "A", 100, "1 hour")
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			got[*m.Group] = append(got[*m.Group], r3Seq(t, m))
		}
		b.ack(t, A, ms[0].LeaseID, nil)
	}
	require.Equal(t, []int64{1, 2}, got["a"])
	require.Equal(t, []int64{1, 2}, got["b"])
	require.Equal(t, []int64{1, 2}, got["c"])
}

// S2. pause/resume and unsubscribe (cancelled) with unapplied acks.
func TestFixesEdgeSeqPauseUnsubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.pu", "semantics => 'pubsub'", "sequence_ordering => true")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rf.pu', 'g')`)
	require.NoError(t, err)
	g := ptr("g")
	b.r3Pub(t, b.Pool, "rf.pu", "a", 1)
	b.r3Pub(t, b.Pool, "rf.pu", "a", 2)
	m := b.read(t, b.Pool, "rf.pu", g, "c", 10, "1 hour")
	require.Equal(t, []int64{1}, r3Seqs(t, m))
	b.ack(t, b.Pool, m[0].LeaseID, nil)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.pause('rf.pu', 'g')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.resume('rf.pu', 'g')`)
	require.NoError(t, err)
	require.Equal(t, []int64{2}, r3Seqs(t, b.read(t, b.Pool, "rf.pu", g, "c", 10, "1 hour")))
	// unsubscribe with an ack open in another transaction
	b.r3Pub(t, b.Pool, "rf.pu", "b", 1)
	m = b.read(t, b.Pool, "rf.pu", g, "c", 10, "1 hour")
	require.Len(t, m, 1)
	A, U := b.Conn(t), b.Conn(t)
	tx, err := A.Begin(b.ctx)
	require.NoError(t, err)
	b.ack(t, tx, m[0].LeaseID, nil)
	ch := rwAsync(func() error { _, e := U.Exec(b.ctx, `SELECT fanout.unsubscribe('rf.pu', 'g')`); return e })
	b.tWaitBlocked(t, U)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-ch)
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_done`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_wait`))
	require.Equal(t, int64(2), b.rfNext(t, "rf.pu", "b"))
}

// S3. replay mixing parked and handed-out ids: all-or-nothing.
func TestFixesEdgeReplayMixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.rp", "sequence_ordering => true")
	a1 := b.r3Pub(t, b.Pool, "rf.rp", "a", 1)
	a2 := b.r3Pub(t, b.Pool, "rf.rp", "a", 2) // parked
	b1 := b.r3Pub(t, b.Pool, "rf.rp", "b", 1)
	m := b.read(t, b.Pool, "rf.rp", nil, "c", 10, "1 hour")
	require.ElementsMatch(t, []int64{a1, b1}, ids(m))
	b.ack(t, b.Pool, m[0].LeaseID, []int64{b1})
	ev0 := b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'replay'`)
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.replay('rf.rp', NULL, ARRAY[$1::bigint, $2, $3])`, b1, a2, a1)
	require.Equal(t, "PGQ03", pgState(err))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.retry`), "nothing queued")
	require.Equal(t, ev0, b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'replay'`), "nothing logged")
}

// S4. A message the group's cursor passed without handing it out because
// seek skipped it (a2, parked, dropped by seek 'latest') counts as passed:
// replay re-delivers it, without ordering (README: replay re-delivers what
// the cursor passed, handed out or skipped by seek; only a message still
// waiting for its turn is refused).
func TestFixesEdgeReplayAfterSeekDroppedWaiter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf.rp", "sequence_ordering => true")
	a1 := b.r3Pub(t, b.Pool, "rf.rp", "a", 1)
	a2 := b.r3Pub(t, b.Pool, "rf.rp", "a", 2) // parked
	m := b.read(t, b.Pool, "rf.rp", nil, "c", 10, "1 hour")
	require.Equal(t, []int64{a1}, ids(m))
	var n int
	err := b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.rp', NULL, ARRAY[$1::bigint])`, a2).Scan(&n)
	requireSQLState(t, err, "PGQ03") // still waiting for its turn
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.seek('rf.rp', NULL, 'latest')`)
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.rp', NULL, ARRAY[$1::bigint])`, a2).Scan(&n))
	require.Equal(t, 1, n, "skipped by seek: the cursor passed it")
	got := b.read(t, b.Pool, "rf.rp", nil, "c", 10, "1 hour")
	require.Empty(t, ids(got), "replayed in order: a2 waits for a1, which the seek released unacked")
	require.Equal(t, int64(1), b.rfNext(t, "rf.rp", "a"), "a replay does not move the aggregate on")
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.rp', NULL, ARRAY[$1::bigint])`, a1).Scan(&n))
	got = b.read(t, b.Pool, "rf.rp", nil, "c", 10, "1 hour")
	require.Equal(t, []int64{a1}, ids(got))
	b.ack(t, b.Pool, got[0].LeaseID, nil)
	got = b.read(t, b.Pool, "rf.rp", nil, "c", 10, "1 hour")
	require.Equal(t, []int64{a2}, ids(got), "once a1 is acked")
}

// ---------- 3. _kpart_read ----------

// K1. Expired page whose messages hit max_attempts, mixed with due retries
// without a partition (replay) and a page member that is still under the
// limit; the old holder's ack/nack/extend are fenced and change nothing.
func TestFixesEdgeKpartExpiredDeadAndReplayRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.createTopic(t, b.Pool, "rf.k1", "partitions => 1", "max_attempts => 2")
	S1, S2 := b.Conn(t), b.Conn(t)
	x := b.rwPub(t, b.Pool, "rf.k1", "k", `{"x":1}`)
	y := b.rwPub(t, b.Pool, "rf.k1", "k", `{"y":1}`)
	p0 := b.read(t, S1, "rf.k1", nil, "A", 10, "1 hour")
	require.Equal(t, []int64{x, y}, ids(p0))
	b.ack(t, S1, p0[0].LeaseID, nil)
	m := b.rwPubN(t, b.Pool, "rf.k1", "k", 3)
	p1 := b.read(t, S1, "rf.k1", nil, "A", 10, "300 milliseconds")
	require.Equal(t, m, ids(p1))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.k1', NULL, ARRAY[$1::bigint])`, x).Scan(&n))
	require.Equal(t, 1, n)
	b.qWaitExpired(t, p1[0].LeaseID)
	p2 := b.read(t, S1, "rf.k1", nil, "A", 10, "300 milliseconds")
	require.Equal(t, append([]int64{x}, m...), ids(p2), "expired page joins due retries in commit order")
	require.Equal(t, int32(1), p2[0].Attempt)
	for _, q := range p2[1:] {
		require.Equal(t, int32(2), q.Attempt)
	}
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.k1', NULL, ARRAY[$1::bigint])`, y).Scan(&n))
	require.Equal(t, 1, n)
	b.qWaitExpired(t, p2[0].LeaseID)
	p3 := b.read(t, S2, "rf.k1", nil, "A", 10, "1 hour")
	require.Equal(t, []int64{x, y}, ids(p3), "m's are dead (attempt 2 of 2), x (attempt 2) and y (1) in order")
	require.Equal(t, []int32{2, 1}, []int32{p3[0].Attempt, p3[1].Attempt})
	require.Equal(t, int64(3), b.count(t, `SELECT count(*) FROM fanout.dead_letter WHERE message_id = ANY ($1)`, m))
	snap := func() string {
		var s string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT coalesce((SELECT string_agg(message_id || ':' || attempt, ',' ORDER BY message_id) FROM fanout.retry), '')
			|| '|' || (SELECT count(*) FROM fanout.dead_letter) || '|' ||
			(SELECT string_agg(lease_id || ':' || open_count || ':' || expires_at, ',' ORDER BY lease_id) FROM fanout.lease)`).Scan(&s))
		return s
	}
	before := snap()
	_, err := b.rwAck(S1, p2[0].LeaseID, []int64{x})
	require.Equal(t, "PGQ11", pgState(err), "old holder's ack of x")
	_, err = b.rwAck(S1, p2[0].LeaseID, nil)
	require.Equal(t, "PGQ11", pgState(err))
	_, err = S1.Exec(b.ctx, `SELECT fanout.nack($1, NULL, '0', 'late')`, p2[0].LeaseID)
	require.Equal(t, "PGQ11", pgState(err), "old holder's nack")
	_, err = S1.Exec(b.ctx, `SELECT fanout.nack($1, ARRAY[$2::bigint], '0', 'late')`, p2[0].LeaseID, m[0])
	require.Equal(t, "PGQ11", pgState(err), "old holder's nack of a dead-lettered message")
	_, err = S1.Exec(b.ctx, `SELECT fanout.extend_lease($1, '1 hour')`, p2[0].LeaseID)
	require.Equal(t, "PGQ11", pgState(err))
	require.Equal(t, before, snap(), "fenced calls changed nothing")
	b.ack(t, S2, p3[0].LeaseID, nil)
	require.Empty(t, b.read(t, S2, "rf.k1", nil, "A", 10, "1 hour"))
	b.pRequireOnePagePerPartition(t, "rf.k1")
}

// K2. A nack not yet due plus an expired page: the partition waits; when
// the nack is due, one page in commit order. Then the old holder is fenced.
func TestFixesEdgeKpartNotDueNackPlusExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.createTopic(t, b.Pool, "rf.k2", "partitions => 1")
	S1, S2 := b.Conn(t), b.Conn(t)
	m := b.rwPubN(t, b.Pool, "rf.k2", "k", 4)
	p1 := b.read(t, S1, "rf.k2", nil, "A", 10, "300 milliseconds")
	require.Equal(t, m, ids(p1))
	require.Equal(t, 1, b.qNack(t, S1, p1[0].LeaseID, []int64{m[1]}, ptr("1 hour"), "later"))
	b.qWaitExpired(t, p1[0].LeaseID)
	require.Empty(t, b.read(t, S2, "rf.k2", nil, "A", 10, "1 hour"), "head-of-line: m1's retry not due")
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.retry SET not_before = now() - interval '1 second'`)
	require.NoError(t, err)
	p2 := b.read(t, S2, "rf.k2", nil, "A", 10, "1 hour")
	require.Equal(t, m, ids(p2), "commit order")
	for _, q := range p2 {
		require.Equal(t, int32(2), q.Attempt)
	}
	_, err = b.rwAck(S1, p1[0].LeaseID, []int64{m[2]})
	require.Equal(t, "PGQ11", pgState(err))
	n, err := b.rwAck(S2, p2[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	b.pRequireOnePagePerPartition(t, "rf.k2")
}

// K3. A delayed message due in the same partition joins an expired page.
func TestFixesEdgeKpartDelayedPlusExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.createTopic(t, b.Pool, "rf.k3", "partitions => 1")
	var d int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rf.k3', '{"d":1}', message_group => 'k', delay => '1 hour')`).Scan(&d))
	m := b.rwPubN(t, b.Pool, "rf.k3", "k", 3)
	p1 := b.read(t, b.Pool, "rf.k3", nil, "A", 10, "300 milliseconds")
	require.Equal(t, m, ids(p1))
	b.qWaitExpired(t, p1[0].LeaseID)
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.retry SET not_before = now() - interval '1 second' WHERE message_id = $1`, d)
	require.NoError(t, err)
	p2 := b.read(t, b.Pool, "rf.k3", nil, "A", 2, "1 hour")
	require.Equal(t, []int64{d, m[0]}, ids(p2), "commit order, max_messages 2")
	require.Equal(t, []int32{1, 2}, []int32{p2[0].Attempt, p2[1].Attempt})
	b.ack(t, b.Pool, p2[0].LeaseID, nil)
	p3 := b.read(t, b.Pool, "rf.k3", nil, "A", 10, "1 hour")
	require.Equal(t, m[1:], ids(p3), "the rest of the expired page next")
	require.Equal(t, []int32{2, 2}, []int32{p3[0].Attempt, p3[1].Attempt})
	b.ack(t, b.Pool, p3[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "rf.k3", nil, "A", 10, "1 hour"))
	b.pRequireOnePagePerPartition(t, "rf.k3")
}

// K4. whole_transactions over retries of several transactions.
func TestFixesEdgeKpartWholeTxRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.createTopic(t, b.Pool, "rf.k4", "partitions => 1", "whole_transactions => true")
	var txs [][]int64
	for i := 0; i < 3; i++ {
		got, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rf.k4', array_agg(jsonb_build_object('i', i)),
			message_groups => array_agg('k'::text)) FROM generate_series(1, 3) i`)
		require.NoError(t, err)
		txs = append(txs, got)
	}
	p1 := b.read(t, b.Pool, "rf.k4", nil, "A", 100, "1 hour")
	require.Len(t, p1, 9)
	b.qNack(t, b.Pool, p1[0].LeaseID, nil, ptr("0"), "again")
	p2 := b.read(t, b.Pool, "rf.k4", nil, "A", 4, "1 hour")
	require.Equal(t, append(append([]int64{}, txs[0]...), txs[1]...), ids(p2), "4 -> through the end of tx 2")
	b.ack(t, b.Pool, p2[0].LeaseID, nil)
	p3 := b.read(t, b.Pool, "rf.k4", nil, "A", 1, "1 hour")
	require.Equal(t, txs[2], ids(p3))
	b.ack(t, b.Pool, p3[0].LeaseID, nil)
	b.pRequireOnePagePerPartition(t, "rf.k4")
}

// K5. whole_transactions with > 10,000 retries of one transaction (replayed:
// kpart NULL), behind a small one.
func TestFixesEdgeKpartWholeTxRetriesCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.createTopic(t, b.Pool, "rf.k5", "partitions => 1", "whole_transactions => true")
	small, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rf.k5', array_agg(jsonb_build_object('i', i)),
		message_groups => array_agg('k'::text)) FROM generate_series(1, 5) i`)
	require.NoError(t, err)
	big, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rf.k5', array_agg(jsonb_build_object('i', i)),
		message_groups => array_agg('k'::text)) FROM generate_series(1, 10050) i`)
	require.NoError(t, err)
	var all []int64
	for i := 0; i < 5; i++ {
		p := b.read(t, b.Pool, "rf.k5", nil, "A", 10000, "1 hour")
		if len(p) == 0 {
			break
		}
		all = append(all, ids(p)...)
		b.ack(t, b.Pool, p[0].LeaseID, nil)
	}
	require.Len(t, all, 10055)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.k5', NULL, $1::bigint[])`, all).Scan(&n))
	require.Equal(t, 10055, n)
	ev0 := b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'transaction_split' AND detail->>'retries' = 'true'`)
	p := b.read(t, b.Pool, "rf.k5", nil, "A", 10, "1 hour")
	require.Len(t, p, 10000, "cap")
	require.Equal(t, small, ids(p)[:5])
	require.Equal(t, big[:9995], ids(p)[5:])
	require.Equal(t, ev0+1, b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'transaction_split' AND detail->>'retries' = 'true'`))
	b.ack(t, b.Pool, p[0].LeaseID, nil)
	p = b.read(t, b.Pool, "rf.k5", nil, "A", 10, "1 hour")
	require.Equal(t, big[9995:], ids(p), "the rest of the big transaction, whole")
	b.ack(t, b.Pool, p[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "rf.k5", nil, "A", 10, "1 hour"))
	b.pRequireOnePagePerPartition(t, "rf.k5")
}

// K6. Replayed retries (kpart NULL) of a message of partition 1, while
// partition 0 has an expired page: no message handed out twice at once, and
// the one-page invariant per partition.
func TestFixesEdgeKpartReplayOtherPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.keepLeaseHistory(t)
	b.rwPubsub(t, "rf.k6", 2, "")
	var err error
	var k0, k1 string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT min(k) FILTER (WHERE fanout.partition_of('rf.k6', k) = 0),
		min(k) FILTER (WHERE fanout.partition_of('rf.k6', k) = 1) FROM (SELECT 'key-' || i AS k FROM generate_series(1, 20) i) x`).Scan(&k0, &k1))
	g := ptr("g")
	y := b.rwPub(t, b.Pool, "rf.k6", k1, `{}`)
	q1, err := pReadAs(b.ctx, b.Pool, "rf.k6", g, nil, 10, "1 hour", ptr(1))
	require.NoError(t, err)
	require.Equal(t, []int64{y}, ids(q1))
	b.ack(t, b.Pool, q1[0].LeaseID, nil)
	m := b.rwPubN(t, b.Pool, "rf.k6", k0, 3)
	p1, err := pReadAs(b.ctx, b.Pool, "rf.k6", g, nil, 10, "300 milliseconds", ptr(0))
	require.NoError(t, err)
	require.Equal(t, m, ids(p1))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rf.k6', 'g', ARRAY[$1::bigint])`, y).Scan(&n))
	b.qWaitExpired(t, p1[0].LeaseID)
	p2, err := pReadAs(b.ctx, b.Pool, "rf.k6", g, nil, 10, "1 hour", ptr(0))
	require.NoError(t, err)
	got := ids(p2)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	t.Logf("partition 0 page after expiry with a kpart-NULL retry of partition 1: %v", ids(p2))
	require.Subset(t, got, m, "the expired page's messages all come")
	q2, err := pReadAs(b.ctx, b.Pool, "rf.k6", g, nil, 10, "1 hour", ptr(1))
	require.NoError(t, err)
	for _, id := range ids(q2) {
		require.NotContains(t, ids(p2), id, "one message on two pages at once")
	}
	b.pRequireOnePagePerPartition(t, "rf.k6")
}
