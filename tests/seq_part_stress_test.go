package tests

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sequence ordering and key partitions under load, with the hard
// edge cases scripted in: seeks back to 'earliest', replays of acked ids,
// pauses, nacks, expiries, late acks, a raise of P with
// alter_topic, and maintenance rotating and reclaiming every 40 ms with
// retention 0.
//
// Topic 'ss' is sequence-ordered: producers publish per-aggregate sequences
// out of order within a transaction, leave gaps that later transactions
// fill, and roll whole transactions back (their sequences are published
// again later). Topic 'sp' has P=4 key partitions (raised to 8 mid-run, in
// the documented way: producers paused until every group consumed what was
// published before): one producer per key, so each key's commit order is
// known. Groups: s1..s3 on 'ss'; pe (explicit partition reads), pa1 and pa2
// (automatic assignment) on 'sp'; 2-3 consumers each.
//
// Per group the test reports committed / delivered (distinct) / missing /
// out-of-order; missing and out-of-order must be 0:
//   - missing: a committed message the group never had delivered;
//   - out-of-order, 'ss': a delivery of aggregate A's sequence n > 1 by a
//     read that returned before any (successful) ack of A's n-1 began (the
//     client's clock before COMMIT, or before the call of an autocommit ack);
//   - out-of-order, 'sp': a delivery of key k's #n in a page whose read
//     returned before some #m < n of k was acked, unless #m is in the same
//     page before #n; a delivery of a message the group had acked already
//     (a replay, or after a seek back) is not checked: README gives replays
//     no order, and a member may nack #m and ack #n of one page.
//
// Times are taken before an ack begins and after a read returns, so
// recording lag can only hide a violation, never invent one. Every group
// also ends with lost_messages 0, and check_consistency() finds nothing.
//
// A deadlock (40P01) of read(..., ack => lease) with seek fails the test:
// both take the group row (on 'sp' the leases, then the key partition's
// row) in one order.
// PGQ_STRESS_SECONDS sets the load phase (default 12).
func TestSeqPartStress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seconds := 12
	if s := os.Getenv("PGQ_STRESS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		seconds = n
	}
	load := time.Duration(seconds) * time.Second
	b.keepLeaseHistory(t) // for the diagnosis of a violation
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const opts = "semantics => 'pubsub', partition_interval => '1 minute', retention => '0', " +
		"zero_subscription_retention => '0', max_attempts => 1000"
	for _, sql := range []string{
		"SELECT fanout.create_topic('ss', sequence_ordering => true, " + opts + ")",
		"SELECT fanout.create_topic('sp', partitions => 4, " + opts + ")",
		"SELECT fanout.subscribe('ss', 's1', 'earliest')", "SELECT fanout.subscribe('ss', 's2', 'earliest')",
		"SELECT fanout.subscribe('ss', 's3', 'earliest')",
		"SELECT fanout.subscribe('sp', 'pe', 'earliest')", "SELECT fanout.subscribe('sp', 'pa1', 'earliest')",
		"SELECT fanout.subscribe('sp', 'pa2', 'earliest')",
	} {
		_, err := pool.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}

	st := newSPState()
	st.parts.Store(4)
	groups := []*spGroup{
		newSPGroup("ss", "s1", 2, false), newSPGroup("ss", "s2", 3, false), newSPGroup("ss", "s3", 2, false),
		newSPGroup("sp", "pe", 2, true), newSPGroup("sp", "pa1", 3, false), newSPGroup("sp", "pa2", 2, false),
	}
	group := map[string]*spGroup{}
	for _, g := range groups {
		group[g.name] = g
	}

	loadCtx, stopLoad := context.WithTimeout(b.ctx, load)
	defer stopLoad()
	consumeCtx, stopConsume := context.WithCancel(b.ctx)
	defer stopConsume()
	maintCtx, stopMaint := context.WithCancel(b.ctx)
	defer stopMaint()

	var producers, consumers, others, maint sync.WaitGroup
	for p := 0; p < 3; p++ {
		producers.Add(1)
		go func() { defer producers.Done(); st.produceSeq(loadCtx, pool, p) }()
	}
	for p := 0; p < 4; p++ {
		producers.Add(1)
		go func() { defer producers.Done(); st.producePart(loadCtx, pool, p) }()
	}
	for _, g := range groups {
		for c := 0; c < g.consumers; c++ {
			consumers.Add(1)
			go func() { defer consumers.Done(); st.consume(consumeCtx, pool, g, c) }()
		}
	}
	maint.Add(1)
	go func() { defer maint.Done(); spMaintain(maintCtx, st, pool) }()
	others.Add(2)
	go func() { defer others.Done(); st.replayer(loadCtx, pool, groups) }()
	go func() { defer others.Done(); st.direct(loadCtx, pool, load, group) }()

	producers.Wait()
	others.Wait()
	// Every gap filled, every rolled-back sequence published again: the
	// sequences of each aggregate are 1..n, all committed.
	st.fillSeq(b.ctx, pool)
	t.Logf("load done: %d sequenced and %d keyed messages committed (%d transactions rolled back), events: %s",
		st.committedIn("ss"), st.committedIn("sp"), st.rollbacks.Load(), st.eventLog())

	// Drain: consumers go on until every group has had every committed
	// message delivered (or a generous deadline passes; the report then
	// names what is missing). A drain that makes no progress for 30 s
	// stops there.
	drained, drainStart := false, time.Now()
	lastN, progressed := -1, time.Now()
	for deadline, next := time.Now().Add(120*time.Second), time.Now().Add(5*time.Second); time.Now().Before(deadline); {
		n, per := st.missing(groups)
		if n == 0 {
			drained = true
			break
		}
		if n != lastN {
			lastN, progressed = n, time.Now()
		} else if time.Since(progressed) > 30*time.Second {
			t.Logf("drain: no progress for 30 s")
			break
		}
		if time.Now().After(next) {
			t.Logf("drain: %v deliveries still missing after %s", per, time.Since(drainStart).Round(time.Second))
			next = next.Add(5 * time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("drain: %s", time.Since(drainStart).Round(time.Millisecond))
	stopConsume()
	consumers.Wait()
	stopMaint()
	maint.Wait()

	for _, e := range st.firstErrors() {
		t.Logf("error: %s", e)
	}
	for _, g := range groups {
		r := st.report(g)
		t.Logf("%s %-3s committed %6d delivered %6d missing %d out-of-order %d (pages %d, acked %d, rolled-back delivered %d, "+
			"redelivered after an ack %d)",
			g.topic, g.name, r.committed, r.delivered, r.missing, r.outOfOrder, r.pages, r.acked, r.ghosts, r.redelivered)
		for _, l := range r.notes {
			t.Logf("  %s", l)
		}
		if r.missing > 0 {
			st.diagnoseMissing(b.ctx, t, pool, g, r.missingIDs)
		}
		if len(r.leases) > 0 {
			spLeaseHistory(b.ctx, t, pool, r.leases)
		}
		assert.Zero(t, r.missing, "%s/%s: committed messages never delivered", g.topic, g.name)
		assert.Zero(t, r.outOfOrder, "%s/%s: deliveries out of order", g.topic, g.name)
		assert.Zero(t, r.ghosts, "%s/%s: rolled-back messages delivered", g.topic, g.name)
	}
	if !drained {
		t.Logf("the drain stopped before every group had everything")
	}
	require.Zero(t, st.errs.Load(), "unexpected errors: %v", st.firstErrors())

	rows, err := pool.Query(b.ctx, "SELECT coalesce(topic, '') || '/' || coalesce(group_name, '') || ': ' || coalesce(problem, '') FROM fanout.check_consistency()")
	require.NoError(t, err)
	problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, problems)
	rows, err = pool.Query(b.ctx, "SELECT topic || '/' || group_name || ': ' || lost_messages FROM fanout.groups WHERE lost_messages <> 0")
	require.NoError(t, err)
	lost, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, lost, "groups that lost messages to cleanup")
	require.EqualValues(t, len(groups), b.count(t, "SELECT count(*) FROM fanout.groups WHERE topic IN ('ss', 'sp') AND lost_messages = 0"))
}

// spItem names a message: its aggregate (or key) and its sequence (or
// number within the key).
type spItem struct {
	agg string
	n   int64
}

// spID is a message id of a topic (each topic numbers its own).
type spID struct {
	topic string
	id    int64
}

// spPage is one read's page: its ids in page order and when it returned.
type spPage struct {
	ret      time.Time
	ids      []int64
	attempts []int32
	lease    int64
	consumer string
}

// spAck is one successful ack, for the diagnosis of a violation.
type spAck struct {
	began    time.Time
	lease    int64
	ids      []int64
	consumer string
	how      string
}

type spGroup struct {
	topic, name string
	consumers   int
	explicit    bool

	mu    sync.Mutex
	pages []spPage
	acked map[int64]time.Time // message id -> begin of its first successful ack
	got   map[int64]bool      // delivered ids
	order []int64             // acked ids in ack order (replay picks recent ones)
	acks  []spAck
}

func newSPGroup(topic, name string, consumers int, explicit bool) *spGroup {
	return &spGroup{topic: topic, name: name, consumers: consumers, explicit: explicit,
		acked: map[int64]time.Time{}, got: map[int64]bool{}}
}

func (g *spGroup) delivered(ms []msg, ret time.Time, consumer string) {
	p := spPage{ret: ret, ids: make([]int64, len(ms)), attempts: make([]int32, len(ms)), lease: ms[0].LeaseID,
		consumer: consumer}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, m := range ms {
		p.ids[i] = m.MessageID
		p.attempts[i] = m.Attempt
		g.got[m.MessageID] = true
	}
	g.pages = append(g.pages, p)
}

// ackedAt records a successful ack of ids that began at began.
func (g *spGroup) ackedAt(ids []int64, began time.Time, lease int64, consumer, how string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.acks = append(g.acks, spAck{began, lease, ids, consumer, how})
	for _, id := range ids {
		if old, ok := g.acked[id]; !ok || began.Before(old) {
			if !ok {
				g.order = append(g.order, id)
			}
			g.acked[id] = began
		}
	}
}

type spState struct {
	mu     sync.Mutex
	items  map[string]map[int64]spItem // topic -> committed message id -> what it is (ids are per topic)
	byItem map[string]map[spItem]int64 // topic -> committed item -> id

	// Sequence allocation ('ss'): per aggregate the next new sequence and
	// the sequences owed (gaps left on purpose, rolled-back ones).
	seqNext    map[string]int64
	seqPending map[string][]int64

	parts     atomic.Int32 // P of 'sp' as the explicit readers may use it
	holdPart  sync.RWMutex // 'sp' producers hold it shared per transaction; the raise of P takes it
	rollbacks atomic.Int64
	start     time.Time
	// For diagnosis: when each message committed (and its key partition).
	committedAt map[spID]string
	events      []string
	replays     atomic.Int64
	// What the consumers did: pages left to expire, acks after a short
	// lease ran out, nacks, fenced calls (PGQ11), acks in a business
	// transaction, acks with the next read.
	expired, late, nacks, fenced, txAcks, readAcks atomic.Int64
	errs                                           countErr
}

const spAggregates = 64

func newSPState() *spState {
	s := &spState{items: map[string]map[int64]spItem{"ss": {}, "sp": {}},
		byItem:  map[string]map[spItem]int64{"ss": {}, "sp": {}},
		seqNext: map[string]int64{}, seqPending: map[string][]int64{}, start: time.Now(), committedAt: map[spID]string{}}
	for a := 0; a < spAggregates; a++ {
		s.seqNext[fmt.Sprintf("a%02d", a)] = 1
	}
	return s
}

func (s *spState) firstErrors() []string {
	s.errs.mu.Lock()
	defer s.errs.mu.Unlock()
	return s.errs.msgs
}

func (s *spState) event(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf("%s at %s", e, time.Since(s.start).Round(time.Millisecond)))
}

func (s *spState) eventLog() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%v, %d replays; consumers: %d pages left to expire, %d late acks, %d nacks, %d fenced, "+
		"%d acks in a business transaction, %d with the next read",
		s.events, s.replays.Load(), s.expired.Load(), s.late.Load(), s.nacks.Load(), s.fenced.Load(),
		s.txAcks.Load(), s.readAcks.Load())
}

func (s *spState) commit(topic string, ids []int64, items []spItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		s.items[topic][id] = items[i]
		s.byItem[topic][items[i]] = id
		c := fmt.Sprintf("%s committed at %s", items[i].agg, time.Since(s.start).Round(time.Millisecond))
		if topic == "sp" {
			// Its key partition (fanout.partition_of's hash, README).
			sum := md5.Sum([]byte(items[i].agg))
			c += fmt.Sprintf(" with P %d: key partition %d", s.parts.Load(),
				binary.BigEndian.Uint32(sum[:4])%uint32(s.parts.Load()))
		}
		s.committedAt[spID{topic, id}] = c
	}
}

func (s *spState) committedIn(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byItem[topic])
}

// takeSeq hands a transaction sequences of agg: some it owes (gaps, rolled
// back), then 1-3 new ones of which some may be left out as gaps for later.
func (s *spState) takeSeq(rng *rand.Rand, agg string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	if pend := s.seqPending[agg]; len(pend) > 0 && rng.IntN(2) == 0 {
		k := 1 + rng.IntN(len(pend))
		rng.Shuffle(len(pend), func(i, j int) { pend[i], pend[j] = pend[j], pend[i] })
		out = append(out, pend[:k]...)
		s.seqPending[agg] = append([]int64(nil), pend[k:]...)
	}
	for i, k := 0, 1+rng.IntN(3); i < k; i++ {
		n := s.seqNext[agg]
		s.seqNext[agg]++
		if i > 0 && rng.IntN(4) == 0 {
			s.seqPending[agg] = append(s.seqPending[agg], n) // a gap: published later
			continue
		}
		out = append(out, n)
	}
	return out
}

func (s *spState) giveBack(items []spItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		s.seqPending[it.agg] = append(s.seqPending[it.agg], it.n)
	}
}

// publishItems publishes items in their order (one by one, or as one batch)
// and returns their ids.
func spPublish(ctx context.Context, tx pgx.Tx, topic string, items []spItem, batch bool) ([]int64, error) {
	key := "a"
	if topic == "sp" {
		key = "k"
	}
	if batch {
		payloads := make([]string, len(items))
		aggs := make([]string, len(items))
		seqs := make([]int64, len(items))
		for i, it := range items {
			payloads[i] = fmt.Sprintf(`{%q:%q,"n":%d}`, key, it.agg, it.n)
			aggs[i], seqs[i] = it.agg, it.n
		}
		sql := `SELECT fanout.publish_batch($1, $2::jsonb[], message_groups => $3)`
		args := []any{topic, payloads, aggs}
		if topic == "ss" {
			sql = `SELECT fanout.publish_batch($1, $2::jsonb[], message_groups => $3, sequences => $4)`
			args = append(args, seqs)
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	ids := make([]int64, len(items))
	for i, it := range items {
		payload := fmt.Sprintf(`{%q:%q,"n":%d}`, key, it.agg, it.n)
		var err error
		if topic == "ss" {
			err = tx.QueryRow(ctx, `SELECT fanout.publish('ss', $1::jsonb, message_group => $2, sequence => $3)`,
				payload, it.agg, it.n).Scan(&ids[i])
		} else {
			err = tx.QueryRow(ctx, `SELECT fanout.publish('sp', $1::jsonb, message_group => $2)`,
				payload, it.agg).Scan(&ids[i])
		}
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// produceSeq publishes sequences of random aggregates (shared by every
// producer, so transactions of one aggregate overlap and commit out of
// order), shuffled within the transaction; an eighth of the transactions
// roll back and their sequences go back to be published later.
func (s *spState) produceSeq(ctx context.Context, pool *pgxpool.Pool, p int) {
	rng := rand.New(rand.NewPCG(uint64(p), 26))
	for ctx.Err() == nil {
		var items []spItem
		a1 := rng.IntN(spAggregates)
		for _, a := range []int{a1, (a1 + 1 + rng.IntN(spAggregates-1)) % spAggregates}[:1+rng.IntN(2)] {
			agg := fmt.Sprintf("a%02d", a)
			for _, n := range s.takeSeq(rng, agg) {
				items = append(items, spItem{agg, n})
			}
		}
		rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		tx, err := pool.Begin(ctx)
		if err != nil {
			s.giveBack(items)
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("begin: %w", err))
			}
			return
		}
		ids, err := spPublish(ctx, tx, "ss", items, rng.IntN(3) == 0)
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		if err != nil || rng.IntN(8) == 0 {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			s.giveBack(items)
			s.rollbacks.Add(1)
			if err != nil && ctx.Err() == nil {
				s.errs.add(fmt.Errorf("publish ss %v: %w", items, err))
			}
			continue
		}
		// Not cancelled with the load: a commit cut off by the client may
		// still commit, unrecorded.
		if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
			s.errs.add(fmt.Errorf("commit ss: %w", err))
			s.giveBack(items) // not committed (or unknown): published again by the fill
			return
		}
		s.commit("ss", ids, items)
		time.Sleep(time.Duration(6+rng.IntN(10)) * time.Millisecond)
	}
}

// fillSeq publishes every sequence still owed, highest first, so that each
// aggregate's sequences are 1..n, all committed.
func (s *spState) fillSeq(ctx context.Context, pool *pgxpool.Pool) {
	s.mu.Lock()
	owed := s.seqPending
	s.seqPending = map[string][]int64{}
	s.mu.Unlock()
	for agg, seqs := range owed {
		if len(seqs) == 0 {
			continue
		}
		slices.Sort(seqs)
		slices.Reverse(seqs)
		items := make([]spItem, len(seqs))
		for i, n := range seqs {
			items[i] = spItem{agg, n}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ids, err := spPublish(ctx, tx, "ss", items, false)
			if err == nil {
				defer s.commit("ss", ids, items) // after the commit
			}
			return err
		})
		if err != nil {
			s.errs.add(fmt.Errorf("fill %s %v: %w", agg, seqs, err))
		}
	}
}

// producePart publishes numbered messages of its own keys (no other
// producer writes them: each key's commit order is its numbering); an
// eighth of the transactions roll back and their numbers are used again.
func (s *spState) producePart(ctx context.Context, pool *pgxpool.Pool, p int) {
	rng := rand.New(rand.NewPCG(uint64(p), 62))
	next := map[string]int64{}
	for ctx.Err() == nil {
		var items []spItem
		k1 := rng.IntN(6)
		for _, k := range []int{k1, (k1 + 1 + rng.IntN(5)) % 6}[:1+rng.IntN(2)] {
			key := fmt.Sprintf("k%d-%d", p, k)
			for i, c := int64(0), int64(1+rng.IntN(3)); i < c; i++ {
				items = append(items, spItem{key, next[key] + 1 + i})
			}
		}
		s.holdPart.RLock()
		tx, err := pool.Begin(ctx)
		if err != nil {
			s.holdPart.RUnlock()
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("begin: %w", err))
			}
			return
		}
		ids, err := spPublish(ctx, tx, "sp", items, rng.IntN(3) == 0)
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		if err != nil || rng.IntN(8) == 0 {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			s.holdPart.RUnlock()
			s.rollbacks.Add(1)
			if err != nil && ctx.Err() == nil {
				s.errs.add(fmt.Errorf("publish sp: %w", err))
			}
			continue
		}
		// Recorded before the raise of P may look at what was committed.
		err = tx.Commit(context.WithoutCancel(ctx))
		if err == nil {
			s.commit("sp", ids, items)
		}
		s.holdPart.RUnlock()
		if err != nil {
			s.errs.add(fmt.Errorf("commit sp: %w", err))
			return
		}
		for _, it := range items {
			next[it.agg] = max(next[it.agg], it.n)
		}
		time.Sleep(time.Duration(6+rng.IntN(10)) * time.Millisecond)
	}
}

// spRead is fanout.read with every argument this test uses.
func spRead(ctx context.Context, q querier, g *spGroup, consumer string, max int, lease string, part *int, ack *int64) ([]msg, error) {
	rows, err := q.Query(ctx,
		`SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
		   FROM fanout.read($1, $2, $3, $4, $5::interval, partition => $6::int, ack => $7::bigint)`,
		g.topic, g.name, consumer, max, lease, part, ack)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		err := r.Scan(&m.LeaseID, &m.MessageID, &m.Payload, &m.Headers, &m.Group, &m.Published, &m.Attempt)
		return m, err
	})
}

// consume reads pages of a group and acks them: at once, in a business
// transaction that commits a little later, or with its next read
// (read(..., ack => lease)); now and then it nacks a message for an
// immediate retry, lets a lease expire, or acks after a short lease ran out.
func (s *spState) consume(ctx context.Context, pool *pgxpool.Pool, g *spGroup, n int) {
	h := fnv.New64a()
	h.Write([]byte(g.name))
	rng := rand.New(rand.NewPCG(uint64(n), h.Sum64()))
	consumer := fmt.Sprintf("%s-%d", g.name, n)
	fail := func(what string, err error) bool {
		if ctx.Err() != nil {
			return true
		}
		if qState(err) == "PGQ11" {
			s.fenced.Add(1)
			return false // fenced: the messages come again
		}
		s.errs.add(fmt.Errorf("%s %s/%s: %w", what, g.topic, consumer, err))
		return true
	}
	var carry int64 // a lease to ack with the next read
	var carryIDs []int64
	for ctx.Err() == nil {
		lease, short := "2 seconds", rng.IntN(8) == 0
		if short {
			lease = "100 milliseconds"
		}
		var part *int
		if g.explicit {
			part = ptr(rng.IntN(int(s.parts.Load())))
		}
		var ack *int64
		if carry != 0 {
			ack = &carry
		}
		began := time.Now()
		ms, err := spRead(ctx, pool, g, consumer, 1+rng.IntN(20), lease, part, ack)
		ret := time.Now()
		if carry != 0 {
			if err == nil {
				g.ackedAt(carryIDs, began, carry, consumer, "with the next read")
				s.readAcks.Add(1)
			}
			carry, carryIDs = 0, nil
		}
		if err != nil {
			if fail("read", err) {
				return
			}
			continue
		}
		if len(ms) == 0 {
			time.Sleep(time.Duration(3+rng.IntN(5)) * time.Millisecond)
			continue
		}
		g.delivered(ms, ret, consumer)
		lid := ms[0].LeaseID
		nacked := false
		switch r := rng.IntN(20); {
		case short && r < 6: // let the lease expire: the page comes back
			s.expired.Add(1)
			continue
		case short && r < 12: // ack late: fenced, or still fine
			s.late.Add(1)
			time.Sleep(150 * time.Millisecond)
		case r == 19: // nack one for an immediate retry, ack the rest
			if _, err := pool.Exec(ctx, "SELECT fanout.nack($1, $2, '0')", lid, []int64{ms[0].MessageID}); err != nil {
				if fail("nack", err) {
					return
				}
				continue
			}
			ms, nacked = ms[1:], true
			s.nacks.Add(1)
		}
		if len(ms) == 0 {
			continue
		}
		ids := make([]int64, len(ms))
		for i, m := range ms {
			ids[i] = m.MessageID
		}
		switch r := rng.IntN(6); {
		case r == 0 && !nacked && !short: // with the next read
			carry, carryIDs = lid, ids
		case r == 1: // inside a business transaction that commits a little later
			tx, err := pool.Begin(ctx)
			if err != nil {
				fail("begin", err)
				return
			}
			var settled int
			err = tx.QueryRow(ctx, "SELECT fanout.ack($1, $2)", lid, ids).Scan(&settled)
			if err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				if fail("ack", err) {
					return
				}
				continue
			}
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
			commitBegan := time.Now()
			if err := tx.Commit(ctx); err != nil {
				if fail("commit ack", err) {
					return
				}
				continue
			}
			s.checkSettled(g, lid, ids, settled)
			g.ackedAt(ids, commitBegan, lid, consumer, "in a transaction")
			s.txAcks.Add(1)
		default:
			ackBegan := time.Now()
			var settled int
			if err := pool.QueryRow(ctx, "SELECT fanout.ack($1, $2)", lid, ids).Scan(&settled); err != nil {
				if fail("ack", err) {
					return
				}
				continue
			}
			s.checkSettled(g, lid, ids, settled)
			g.ackedAt(ids, ackBegan, lid, consumer, "autocommit")
		}
	}
}

// checkSettled: an ack that raised nothing settled every message it named
// (each page is acked once here).
func (s *spState) checkSettled(g *spGroup, lease int64, ids []int64, settled int) {
	if settled != len(ids) {
		s.errs.add(fmt.Errorf("%s/%s: ack of %v under lease %d settled %d", g.topic, g.name, ids, lease, settled))
	}
}

// replayer replays a few ids each group acked recently, every 150 ms or so.
func (s *spState) replayer(ctx context.Context, pool *pgxpool.Pool, groups []*spGroup) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; ctx.Err() == nil; i++ {
		time.Sleep(time.Duration(100+rng.IntN(100)) * time.Millisecond)
		g := groups[i%len(groups)]
		g.mu.Lock()
		var ids []int64
		if n := len(g.order); n > 0 {
			for j := 0; j < 1+rng.IntN(4); j++ {
				ids = append(ids, g.order[n-1-rng.IntN(min(n, 200))])
			}
		}
		g.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		_, err := pool.Exec(ctx, "SELECT fanout.replay($1, $2, $3)", g.topic, g.name, ids)
		switch qState(err) {
		case "":
			if err == nil {
				s.replays.Add(1)
			} else if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("replay %s/%s %v: %w", g.topic, g.name, ids, err))
			}
		case "PGQ18", "PGQ03":
			// Not retained any more, or (after a seek back) not handed out
			// again yet: both are refusals replay documents.
		default:
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("replay %s/%s %v: %w", g.topic, g.name, ids, err))
			}
		}
	}
}

// direct runs the scripted events at fixed points of the load phase.
func (s *spState) direct(ctx context.Context, pool *pgxpool.Pool, load time.Duration, group map[string]*spGroup) {
	start := time.Now()
	at := func(frac float64) bool {
		select {
		case <-time.After(time.Until(start.Add(time.Duration(frac * float64(load))))):
			return true
		case <-ctx.Done():
			return false
		}
	}
	exec := func(what, sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		if err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("%s: %w", what, err))
			}
			return
		}
		s.event(what)
	}
	seek := func(topic, g string) {
		exec("seek "+topic+"/"+g, "SELECT fanout.seek($1, $2, 'earliest')", topic, g)
	}
	// A pause is always followed by its resume, even when the load phase
	// ends in between (under machine load the steps run late, and one
	// begun near the end straddled it): the resume is not cancelled with
	// the load, nor is the pause (whose commit could race the cancel).
	// A group left paused would never drain.
	pause := func(topic, g string) {
		bg := context.WithoutCancel(ctx)
		if _, err := pool.Exec(bg, "SELECT fanout.pause($1, $2)", topic, g); err != nil {
			s.errs.add(fmt.Errorf("pause %s/%s: %w", topic, g, err))
			return
		}
		s.event("pause " + topic + "/" + g)
		time.Sleep(400 * time.Millisecond)
		if _, err := pool.Exec(bg, "SELECT fanout.resume($1, $2)", topic, g); err != nil {
			s.errs.add(fmt.Errorf("resume %s/%s: %w", topic, g, err))
			return
		}
		s.event("resume " + topic + "/" + g)
	}
	for _, step := range []struct {
		at float64
		do func()
	}{
		{0.15, func() { seek("ss", "s2") }},
		{0.25, func() { pause("ss", "s1") }},
		{0.35, func() { s.raiseP(ctx, pool, group) }},
		{0.45, func() { seek("ss", "s1") }},
		{0.5, func() { seek("sp", "pa1"); seek("sp", "pe") }},
		{0.6, func() { pause("sp", "pa2"); pause("ss", "s3") }},
		{0.7, func() { seek("ss", "s3"); seek("sp", "pa2") }},
		{0.8, func() { pause("sp", "pe") }},
	} {
		if !at(step.at) {
			return
		}
		step.do()
	}
}

// raiseP raises 'sp' from 4 to 8 key partitions the way README says keeps
// per-key order: producers paused until every group acked everything
// published, then the raise, then producers go on.
func (s *spState) raiseP(ctx context.Context, pool *pgxpool.Pool, group map[string]*spGroup) {
	s.holdPart.Lock()
	defer s.holdPart.Unlock()
	waitStart := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; {
		s.mu.Lock()
		ids := make([]int64, 0, len(s.byItem["sp"]))
		for _, id := range s.byItem["sp"] {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		pending := 0
		for _, name := range []string{"pe", "pa1", "pa2"} {
			g := group[name]
			g.mu.Lock()
			for _, id := range ids {
				if _, ok := g.acked[id]; !ok {
					pending++
				}
			}
			g.mu.Unlock()
		}
		if pending == 0 {
			break
		}
		if ctx.Err() != nil {
			return // the load ended first
		}
		if time.Now().After(deadline) {
			s.errs.add(fmt.Errorf("raise of P: %d keyed messages still unacked after %s", pending, time.Since(waitStart)))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Not cancelled with the load: a raise whose commit raced the cancel
	// would leave the explicit readers on 4 partitions of 8.
	if _, err := pool.Exec(context.WithoutCancel(ctx), "SELECT fanout.alter_topic('sp', partitions => 8)"); err != nil {
		s.errs.add(fmt.Errorf("alter_topic: %w", err))
		return
	}
	s.parts.Store(8)
	s.event(fmt.Sprintf("P 4->8 (after %s of drain)", time.Since(waitStart).Round(time.Millisecond)))
}

// spMaintain rotates and reclaims every 40 ms as if an hour had passed each
// time (retention 0), and runs a full maintenance round every 10th time.
func spMaintain(ctx context.Context, s *spState, pool *pgxpool.Pool) {
	for i := 0; ctx.Err() == nil; i++ {
		sqls := []string{
			"SELECT fanout._manage_partitions(now() + interval '1 hour')",
			"SELECT fanout._cleanup_partitions(now() + interval '1 hour')",
		}
		if i%10 == 0 {
			sqls = append(sqls, "SELECT fanout.run_maintenance()")
		}
		for _, sql := range sqls {
			if _, err := pool.Exec(ctx, sql); err != nil && ctx.Err() == nil {
				s.errs.add(fmt.Errorf("%s: %w", sql, err))
				return
			}
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// missing counts the committed messages each group has not had delivered.
func (s *spState) missing(groups []*spGroup) (int, map[string]int) {
	s.mu.Lock()
	ids := make(map[string][]int64, 2)
	for topic, items := range s.items {
		for id := range items {
			ids[topic] = append(ids[topic], id)
		}
	}
	s.mu.Unlock()
	n, per := 0, map[string]int{}
	for _, g := range groups {
		g.mu.Lock()
		for _, id := range ids[g.topic] {
			if !g.got[id] {
				n++
				per[g.name]++
			}
		}
		g.mu.Unlock()
	}
	return n, per
}

type spReport struct {
	committed, delivered, missing, outOfOrder, ghosts, pages, acked int
	redelivered                                                     int // deliveries after the group acked the message ('sp': not checked)
	missingIDs                                                      []int64
	notes                                                           []string
	leases                                                          []int64 // of the first violation's trace
}

// report checks a group's deliveries against what was committed and acked,
// after the run (so nothing recorded late counts against it).
func (s *spState) report(g *spGroup) spReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	var r spReport
	byItem := s.byItem[g.topic]
	r.committed = len(byItem)
	r.pages = len(g.pages)
	for _, id := range byItem {
		if g.got[id] {
			r.delivered++
		} else {
			r.missing++
			if len(r.missingIDs) < 5 {
				r.missingIDs = append(r.missingIDs, id)
			}
		}
		if _, ok := g.acked[id]; ok {
			r.acked++
		}
	}
	for id := range g.got {
		if _, ok := s.items[g.topic][id]; !ok {
			r.ghosts++
		}
	}
	never := time.Now().Add(time.Hour)
	ackOf := func(it spItem) time.Time {
		if id, ok := byItem[it]; ok {
			if at, ok := g.acked[id]; ok {
				return at
			}
		}
		return never
	}
	note := func(ids [2]int64, format string, args ...any) {
		r.outOfOrder++
		if len(r.notes) < 5 {
			r.notes = append(r.notes, fmt.Sprintf(format, args...))
		}
		if r.outOfOrder == 1 {
			var lines []string
			lines, r.leases = s.trace(g, ids[:])
			r.notes = append(r.notes, lines...)
		}
	}
	if g.topic == "ss" {
		for _, p := range g.pages {
			for _, id := range p.ids {
				it, ok := s.items[g.topic][id]
				if at, acked := g.acked[id]; acked && at.Before(p.ret) {
					r.redelivered++ // counted, and checked all the same
				}
				if !ok || it.n == 1 {
					continue
				}
				prev := spItem{it.agg, it.n - 1}
				if at := ackOf(prev); at.After(p.ret) {
					note([2]int64{byItem[prev], id}, "%s/%d (id %d) delivered %s before the ack of %d (id %d) began", it.agg, it.n, id,
						spAfter(at, p.ret), it.n-1, byItem[prev])
				}
			}
		}
		return r
	}
	// Key partitions: latest[k][n] = the latest first-ack among #1..#n.
	latest := map[string][]time.Time{}
	for it := range byItem {
		if int64(len(latest[it.agg])) <= it.n {
			latest[it.agg] = append(latest[it.agg], make([]time.Time, it.n+1-int64(len(latest[it.agg])))...)
		}
	}
	for k, l := range latest {
		for n := 1; n < len(l); n++ {
			l[n] = ackOf(spItem{k, int64(n)})
			if l[n].Before(l[n-1]) {
				l[n] = l[n-1]
			}
		}
	}
	for _, p := range g.pages {
		before := map[spItem]bool{} // messages of the page so far
		for _, id := range p.ids {
			it, ok := s.items[g.topic][id]
			if !ok {
				continue
			}
			if at, ok := g.acked[id]; ok && at.Before(p.ret) {
				// Delivered again after the group acked it: a replay (or a
				// seek back), which README exempts from order ("they come
				// when due, like a retry"). A member that nacked #m and
				// acked #n > m of one page, then a replay of #n, would
				// otherwise count.
				r.redelivered++
				before[it] = true
				continue
			}
			// #j..#n-1 are in the page before #n; all of #1..#j-1 must
			// have been acked before the read returned (or be in the page).
			j := it.n
			for j > 1 && before[spItem{it.agg, j - 1}] {
				j--
			}
			if latest[it.agg][j-1].After(p.ret) {
				for m := int64(1); m < j; m++ {
					if at := ackOf(spItem{it.agg, m}); !before[spItem{it.agg, m}] && at.After(p.ret) {
						note([2]int64{byItem[spItem{it.agg, m}], id}, "%s #%d (id %d) delivered %s before the ack of #%d (id %d) began", it.agg, it.n, id,
							spAfter(at, p.ret), m, byItem[spItem{it.agg, m}])
						break
					}
				}
			}
			before[it] = true
		}
	}
	return r
}

// trace lists the pages and acks of a group that hold any of ids, in time
// order (callers hold s.mu and g.mu).
func (s *spState) trace(g *spGroup, ids []int64) ([]string, []int64) {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	var leases []int64
	for _, p := range g.pages {
		for i, id := range p.ids {
			if slices.Contains(ids, id) {
				leases = append(leases, p.lease)
				lines = append(lines, line{p.ret, fmt.Sprintf("%s returned to %s: id %d (attempt %d, #%d of %d in the page) under lease %d; page %v",
					time.Duration(p.ret.Sub(s.start)), p.consumer, id, p.attempts[i], i+1, len(p.ids), p.lease, p.ids)})
			}
		}
	}
	for _, a := range g.acks {
		for _, id := range a.ids {
			if slices.Contains(ids, id) {
				leases = append(leases, a.lease)
				lines = append(lines, line{a.began, fmt.Sprintf("%s ack %s by %s of id %d under lease %d began",
					time.Duration(a.began.Sub(s.start)), a.how, a.consumer, id, a.lease)})
			}
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var out []string
	for _, id := range ids {
		out = append(out, fmt.Sprintf("  id %d: %s", id, s.committedAt[spID{g.topic, id}]))
	}
	for _, l := range lines {
		out = append(out, "  "+l.text)
	}
	return append(out, "  events: "+fmt.Sprint(s.events)), leases
}

func spAfter(ack, ret time.Time) string {
	if ack.After(ret.Add(30 * time.Minute)) {
		return "(never acked)"
	}
	return ack.Sub(ret).String()
}

// spLeaseHistory logs every page of the leases named (audit.lease_all).
func spLeaseHistory(ctx context.Context, t *testing.T, pool *pgxpool.Pool, leases []int64) {
	rows, err := pool.Query(ctx, `
		SELECT format('lease %s: %s kpart %s generation %s, created %s expires %s closed %s, ids %s settled %s reclaimed %s open %s',
		              l.lease_id, l.consumer, l.kpart, l.generation, l.created_at::time, l.expires_at::time,
		              l.closed_at::time, l.msg_ids, l.settled, l.reclaimed, l.open_count)
		FROM audit.lease_all l WHERE l.lease_id IN (SELECT fanout._lease_raw(x) FROM unnest($1::bigint[]) AS x) ORDER BY l.created_at`, leases)
	if err == nil {
		var lines []string
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			for _, l := range lines {
				t.Logf("    %s", l)
			}
		}
	}
	if err != nil {
		t.Logf("    lease history: %v", err)
	}
}

// diagnoseMissing logs what pgq says about a few missing messages.
func (s *spState) diagnoseMissing(ctx context.Context, t *testing.T, pool *pgxpool.Pool, g *spGroup, ids []int64) {
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM fanout.groups WHERE topic = $1 AND group_name = $2`,
		g.topic, g.name).Scan(&status); err != nil {
		status = err.Error()
	}
	t.Logf("  group %s/%s is %s", g.topic, g.name, status)
	for _, id := range ids {
		s.mu.Lock()
		it := s.items[g.topic][id]
		s.mu.Unlock()
		var out string
		err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(to_jsonb(ms)::text, '; '), 'no status')
			FROM fanout.message_status($1, $2) ms WHERE ms.group_name = $3`, g.topic, id, g.name).Scan(&out)
		if err != nil {
			out = err.Error()
		}
		t.Logf("  missing %s #%d (id %d): %s", it.agg, it.n, id, out)
	}
	if g.topic == "ss" {
		var out string
		err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(to_jsonb(x)::text, '; '), 'no gaps')
			FROM fanout.sequence_gaps x WHERE x.group_name = $1`, g.name).Scan(&out)
		if err != nil {
			out = err.Error()
		}
		t.Logf("  sequence gaps of %s: %s", g.name, out)
	}
}
