package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pubPrio publishes one message with a priority and returns its id.
func (b *bundle) pubPrio(t *testing.T, q querier, topic string, prio int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, $2::jsonb, priority => $3)`,
		topic, fmt.Sprintf(`{"p":%d}`, prio), prio).Scan(&id))
	return id
}

// A backlog of mixed priorities drains highest first, equal priorities in
// commit order, in queue topics and pubsub groups alike, across pages.
func TestInboxPriorityDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.prio")
	b.createTopic(t, b.Pool, "in.prio.ps", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('in.prio.ps', 'g')`)
	require.NoError(t, err)

	for _, topic := range []string{"in.prio", "in.prio.ps"} {
		rng := rand.New(rand.NewSource(7))
		type pm struct {
			id   int64
			prio int
		}
		var all []pm
		// Several transactions, priorities shuffled, some 0 (the default).
		for tx := 0; tx < 4; tx++ {
			for i := 0; i < 10; i++ {
				p := rng.Intn(10)
				all = append(all, pm{b.pubPrio(t, b.Pool, topic, p), p})
			}
		}
		want := append([]pm(nil), all...)
		sort.SliceStable(want, func(i, j int) bool { return want[i].prio > want[j].prio })
		var group *string
		if topic == "in.prio.ps" {
			group = ptr("g")
		}
		var got []int64
		for len(got) < len(all) {
			ms := b.read(t, b.Pool, topic, group, "c", 7, "30 seconds")
			require.NotEmpty(t, ms, "%s: drained %d of %d", topic, len(got), len(all))
			got = append(got, ids(ms)...)
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
			// Mid-window, what was acked says so (the cursor stays at the window's start).
			var st string
			require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.message_status($1, $2)`,
				topic, ms[0].MessageID).Scan(&st))
			require.Equal(t, "acked", st)
		}
		wantIDs := make([]int64, len(want))
		for i, w := range want {
			wantIDs[i] = w.id
		}
		require.Equal(t, wantIDs, got, "%s: priority desc, then commit order", topic)
		require.Empty(t, b.read(t, b.Pool, topic, group, "c", 7, "30 seconds"))
	}
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout.topics WHERE prioritized`))
}

// A transaction still open when a window opens comes in the next window
// (its "running at lo" phase), still by priority: ahead of lower levels,
// after higher ones committed later, and a page cut inside it resumes there.
func TestInboxPriorityRunningTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.prio.run")
	// Prioritized first: the first priority publish updates the topic row,
	// which would make the publishes below wait for the open transaction.
	first := b.pubPrio(t, b.Pool, "in.prio.run", 3)
	tx, err := b.Conn(t).Begin(b.ctx)
	require.NoError(t, err)
	var open []int64
	for i := 0; i < 3; i++ {
		open = append(open, b.pubPrio(t, tx, "in.prio.run", 5))
	}
	m1 := b.pubPrio(t, b.Pool, "in.prio.run", 1)
	m0 := b.pubPrio(t, b.Pool, "in.prio.run", 0)
	take := func(max int, want ...int64) {
		t.Helper()
		ms := b.read(t, b.Pool, "in.prio.run", nil, "c", max, "30 seconds")
		require.Equal(t, want, ids2(ms))
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	take(10, first, m1, m0) // the open transaction is not visible yet
	high := b.pubPrio(t, b.Pool, "in.prio.run", 9)
	require.NoError(t, tx.Commit(b.ctx))
	take(2, high, open[0])
	take(2, open[1], open[2])
	take(2)
}

// Low priority is not starved: under a steady stream of high-priority
// messages (more published per round than read), a low-priority message is
// overtaken only by the high-priority messages of its own window, i.e.
// those committed before the read that opened its window.
func TestInboxPriorityStarvationBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.starve")
	// Window 1: high-priority backlog, then it opens on the first read.
	for i := 0; i < 5; i++ {
		b.pubPrio(t, b.Pool, "in.starve", 9)
	}
	ms := b.read(t, b.Pool, "in.starve", nil, "c", 2, "30 seconds")
	require.Len(t, ms, 2)
	low := b.pubPrio(t, b.Pool, "in.starve", 0) // lands in window 2
	delivered := int64(0)
	var highBefore int // high-priority messages published before low's window opened
	highBefore = 5
	for round := 0; round < 100 && delivered == 0; round++ {
		for i := 0; i < 3; i++ {
			b.pubPrio(t, b.Pool, "in.starve", 9)
		}
		ms := b.read(t, b.Pool, "in.starve", nil, "c", 2, "30 seconds")
		for _, m := range ms {
			if m.MessageID == low {
				delivered = int64(round + 1)
			}
		}
		if round == 0 {
			highBefore += 3 // window 2 opens after this round's publishes at the latest
		}
	}
	require.NotZero(t, delivered, "the low-priority message was starved")
	// Rounds of 2 messages: at most highBefore higher messages come first.
	require.LessOrEqual(t, delivered, int64(highBefore/2+2), "overtaken by more than its window")
}

// Publish sequences 1..n of an aggregate; returns ids by sequence.
func (b *bundle) pubSeq(t *testing.T, q querier, topic, agg string, seq int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, $2::jsonb, message_group => $3, sequence => $4)`,
		topic, fmt.Sprintf(`{"agg":%q,"seq":%d}`, agg, seq), agg, seq).Scan(&id))
	return id
}

// 100 aggregates x 20 messages published in shuffled order by 4 producers;
// 4 members per group in 2 groups; every aggregate is processed in sequence
// order (the checker fails on the first message out of turn).
func TestInboxSequenceOrdering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.seq", "semantics => 'pubsub'", "sequence_ordering => true")
	groups := []string{"g1", "g2"}
	for _, g := range groups {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('in.seq', $1)`, g)
		require.NoError(t, err)
	}
	const aggs, per, producers, members = 100, 20, 4, 4
	type item struct {
		agg string
		seq int64
	}
	var items []item
	for a := 0; a < aggs; a++ {
		for s := 1; s <= per; s++ {
			items = append(items, item{fmt.Sprintf("acct-%d", a), int64(s)})
		}
	}
	rand.New(rand.NewSource(12)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })

	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			conn := b.Conn(t)
			for i := p * 10; i < len(items); i += producers * 10 {
				tx, err := conn.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, it := range items[i:min(i+10, len(items))] {
					if _, err := tx.Exec(ctx, `SELECT fanout.publish('in.seq', $1::jsonb, message_group => $2, sequence => $3)`,
						fmt.Sprintf(`{"seq":%d}`, it.seq), it.agg, it.seq); err != nil {
						errs <- err
						return
					}
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(p)
	}
	for _, g := range groups {
		var mu sync.Mutex
		next := map[string]int64{}
		done := 0
		for m := 0; m < members; m++ {
			wg.Add(1)
			go func(g string, m int) {
				defer wg.Done()
				conn := b.Conn(t)
				for {
					mu.Lock()
					finished := done == aggs*per
					mu.Unlock()
					if finished || ctx.Err() != nil {
						return
					}
					ms, err := readMsgs(ctx, conn, "in.seq", &g, fmt.Sprintf("m%d", m), 10, "5 minutes")
					if err != nil {
						errs <- err
						return
					}
					for _, msg := range ms {
						var body struct{ Seq int64 }
						if err := json.Unmarshal(msg.Payload, &body); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						want := next[*msg.Group] + 1
						if body.Seq != want {
							mu.Unlock()
							errs <- fmt.Errorf("group %s aggregate %s: got sequence %d, want %d", g, *msg.Group, body.Seq, want)
							cancel()
							return
						}
						next[*msg.Group] = body.Seq
						done++
						mu.Unlock()
						if _, err := conn.Exec(ctx, `SELECT fanout.ack($1, $2)`, msg.LeaseID, []int64{msg.MessageID}); err != nil {
							errs <- err
							return
						}
					}
					if len(ms) == 0 {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}(g, m)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, g := range groups {
		require.Empty(t, b.read(t, b.Pool, "in.seq", ptr(g), "last", 10, "30 seconds"), "group %s: nothing left", g)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_wait`), "nobody left waiting")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_done`), "every ack applied")
	require.Equal(t, int64(2*aggs), b.count(t, `SELECT count(*) FROM fanout.seq_state WHERE next_seq = $1`, per+1))
}

// A missing sequence shows in sequence_gaps with its waiters, raises one
// alert after gap_alert_after, and publishing it releases the waiters. A
// repeated sequence returns the first id; a dead-lettered predecessor does
// not block.
func TestInboxSequenceGap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.gap", "sequence_ordering => true", "max_attempts => 1")
	ids := map[int64]int64{}
	for _, s := range []int64{1, 2, 4, 5, 7} {
		ids[s] = b.pubSeq(t, b.Pool, "in.gap", "a", s)
	}
	require.Equal(t, ids[2], b.pubSeq(t, b.Pool, "in.gap", "a", 2), "a repeated sequence returns the first id")
	take := func(want ...int64) {
		t.Helper()
		ms := b.read(t, b.Pool, "in.gap", nil, "c", 10, "30 seconds")
		var wantIDs []int64
		for _, s := range want {
			wantIDs = append(wantIDs, ids[s])
		}
		require.Equal(t, wantIDs, ids2(ms))
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	take(1) // 2, 4, 5, 7 wait for 1's ack
	take(2)
	take() // 3 is missing

	type gap struct {
		From, To, Waiting int64
	}
	gaps := func() []gap {
		rows, err := b.Pool.Query(b.ctx, `SELECT missing_from, missing_to, waiting_messages FROM fanout.sequence_gaps
			WHERE topic = 'in.gap' AND group_name IS NULL AND message_group = 'a' ORDER BY missing_from`)
		require.NoError(t, err)
		defer rows.Close()
		var out []gap
		for rows.Next() {
			var g gap
			require.NoError(t, rows.Scan(&g.From, &g.To, &g.Waiting))
			out = append(out, g)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, []gap{{3, 3, 3}, {6, 6, 1}}, gaps())
	var st string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT status FROM fanout.message_status('in.gap', $1)`, ids[4]).Scan(&st))
	require.Equal(t, "waiting", st)

	alerts := func() int64 {
		return b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'sequence_gap' AND topic = 'in.gap'`)
	}
	require.Zero(t, b.count(t, `SELECT fanout._sequence_gap_alerts(now())`), "younger than gap_alert_after (5 minutes)")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('in.gap', gap_alert_after => '1 millisecond')`)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.count(t, `SELECT fanout._sequence_gap_alerts(clock_timestamp() + interval '1 second')`))
	require.Zero(t, b.count(t, `SELECT fanout._sequence_gap_alerts(clock_timestamp() + interval '1 second')`), "one alert per gap")
	require.Equal(t, int64(2), alerts())
	require.Equal(t, int64(3), b.count(t, `SELECT count FROM fanout.event_log WHERE kind = 'sequence_gap'
		AND detail->>'missing_from' = '3'`))

	ids[3] = b.pubSeq(t, b.Pool, "in.gap", "a", 3)
	take(3)
	take(4)
	require.Equal(t, []gap{{6, 6, 1}}, gaps())
	// 5 is dead-lettered (max_attempts 1): 6 is still missing, 7 waits.
	ms := b.read(t, b.Pool, "in.gap", nil, "c", 10, "30 seconds")
	require.Equal(t, []int64{ids[5]}, ids2(ms))
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.nack($1, NULL, '0 seconds')`, ms[0].LeaseID)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.dead_letters WHERE topic = 'in.gap'`))
	take()
	ids[6] = b.pubSeq(t, b.Pool, "in.gap", "a", 6)
	take(6)
	take(7)
	require.Empty(t, gaps())
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_wait`))
}

func ids2(ms []msg) []int64 {
	if len(ms) == 0 {
		return nil
	}
	return ids(ms)
}

// The seed's inbox: receive with dedupe, process in a business transaction
// that acks and publishes a follow-up to an outbox topic; the follow-up is
// delivered once, also when the sender retries the event.
func TestInboxEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "pay.inbox")
	b.createTopic(t, b.Pool, "pay.outbox", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('pay.outbox', 'mailer')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `CREATE TABLE ledger (event text PRIMARY KEY, amount int)`)
	require.NoError(t, err)
	receive := func() int64 {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			`SELECT fanout.publish('pay.inbox', '{"event":"evt-1","amount":10}', dedupe_key => 'evt-1')`).Scan(&id))
		return id
	}
	first := receive()
	require.Equal(t, first, receive(), "the sender's retry is stored once")

	ms := b.read(t, b.Pool, "pay.inbox", nil, "worker", 10, "30 seconds")
	require.Len(t, ms, 1)
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `INSERT INTO ledger VALUES ('evt-1', 10)`)
	require.NoError(t, err)
	require.Equal(t, 1, b.ack(t, tx, ms[0].LeaseID, nil))
	_, err = tx.Exec(b.ctx, `SELECT fanout.publish('pay.outbox', '{"paid":"evt-1"}', dedupe_key => 'paid-evt-1')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	receive() // a late retry of the sender: nothing new
	require.Empty(t, b.read(t, b.Pool, "pay.inbox", nil, "worker", 10, "30 seconds"))

	out := b.read(t, b.Pool, "pay.outbox", ptr("mailer"), "m", 10, "30 seconds")
	require.Len(t, out, 1)
	require.JSONEq(t, `{"paid":"evt-1"}`, string(out[0].Payload))
	b.ack(t, b.Pool, out[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "pay.outbox", ptr("mailer"), "m", 10, "30 seconds"), "delivered once")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM ledger`))
}

// Every new ordering argument is checked, and a refused call writes nothing.
func TestInboxOrderBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.obad")
	b.createTopic(t, b.Pool, "in.oseq", "sequence_ordering => true")
	for _, c := range []struct{ sql, state string }{
		{`SELECT fanout.publish('in.obad', '{}', priority => 10)`, "PGQ03"},
		{`SELECT fanout.publish('in.obad', '{}', priority => -1)`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.obad', ARRAY['{}']::jsonb[], priority => 42)`, "PGQ03"},
		{`SELECT fanout.publish('in.obad', '{}', message_group => 'a', sequence => 1)`, "PGQ23"},
		{`SELECT fanout.publish('in.oseq', '{}', message_group => 'a')`, "PGQ03"},
		{`SELECT fanout.publish('in.oseq', '{}', sequence => 1)`, "PGQ03"},
		{`SELECT fanout.publish('in.oseq', '{}', message_group => 'a', sequence => 0)`, "PGQ03"},
		{`SELECT fanout.publish('in.oseq', '{}', message_group => 'a', sequence => 1, priority => 5)`, "PGQ23"},
		{`SELECT fanout.publish('in.oseq', '{}', message_group => 'a', sequence => 1, delay => '1 minute')`, "PGQ23"},
		{`SELECT fanout.publish_batch('in.oseq', ARRAY['{}', '{}']::jsonb[], message_groups => ARRAY['a', 'a'])`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.oseq', ARRAY['{}', '{}']::jsonb[], message_groups => ARRAY['a', 'a'], sequences => ARRAY[1])`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.oseq', ARRAY['{}', '{}']::jsonb[], message_groups => ARRAY['a', 'a'], sequences => ARRAY[1, NULL])`, "PGQ03"},
		{`SELECT fanout.create_topic('in.obad2', sequence_ordering => NULL)`, "PGQ03"},
		{`SELECT fanout.create_topic('in.obad2', sequence_ordering => true, gap_alert_after => '-1 second')`, "PGQ03"},
		{`SELECT fanout.alter_topic('in.oseq', gap_alert_after => '31 days')`, "PGQ03"},
	} {
		_, err := b.Pool.Exec(b.ctx, c.sql)
		requireSQLState(t, err, c.state)
	}
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout.topic`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.topic WHERE prioritized`), "a refused priority marks nothing")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_published`))
	require.Empty(t, b.read(t, b.Pool, "in.obad", nil, "c", 100, "30 seconds"))
	require.Empty(t, b.read(t, b.Pool, "in.oseq", nil, "c", 100, "30 seconds"))
	// A batch with sequences works and dedupes a repeated (aggregate, sequence).
	rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish_batch('in.oseq', ARRAY['{}', '{}', '{}']::jsonb[],
		message_groups => ARRAY['a', 'a', 'b'], sequences => ARRAY[1, 1, 1])`)
	require.NoError(t, err)
	var got []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		got = append(got, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 3)
	require.Equal(t, got[0], got[1])
	require.NotEqual(t, got[0], got[2])
}

// Concurrent batches sharing dedupe keys (in different orders): one message
// per key, every batch gets the same id for a key, no deadlock.
func TestInboxDedupeBatchConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.batchrace")
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	const n = 6
	got := make([]map[string]int64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			conn := b.Conn(t)
			ks := append([]string(nil), keys...)
			rand.New(rand.NewSource(int64(i))).Shuffle(len(ks), func(a, c int) { ks[a], ks[c] = ks[c], ks[a] })
			<-start
			rows, err := conn.Query(b.ctx, `SELECT fanout.publish_batch('in.batchrace',
				array_fill('{}'::jsonb, ARRAY[6]), dedupe_keys => $1, priority => $2)`, ks, i%3)
			require.NoError(t, err)
			m := map[string]int64{}
			j := 0
			for rows.Next() {
				var id int64
				require.NoError(t, rows.Scan(&id))
				m[ks[j]] = id
				j++
			}
			require.NoError(t, rows.Err())
			got[i] = m
		}(i)
	}
	close(start)
	wg.Wait()
	for i := 1; i < n; i++ {
		require.Equal(t, got[0], got[i], "batch %d", i)
	}
	require.Len(t, b.read(t, b.Pool, "in.batchrace", nil, "c", 100, "30 seconds"), len(keys), "one message per key")
}

// The security model is unchanged: a producer publishes with every new
// option, a consumer cannot publish but reads sequence_gaps.
func TestInboxOrderRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.roles")
	b.createTopic(t, b.Pool, "in.roles.seq", "sequence_ordering => true")
	_, produrl := b.qRole(t, "fanout_producer")
	_, consurl := b.qRole(t, "fanout_consumer")
	prod := b.qConnAs(t, produrl)
	cons := b.qConnAs(t, consurl)
	_, err := prod.Exec(b.ctx, `SELECT fanout.publish('in.roles', '{}', priority => 3, dedupe_key => 'k', delay => '1 second')`)
	require.NoError(t, err)
	_, err = prod.Exec(b.ctx, `SELECT fanout.publish_batch('in.roles', ARRAY['{}']::jsonb[], priority => 2, dedupe_keys => ARRAY['k2'])`)
	require.NoError(t, err)
	_, err = prod.Exec(b.ctx, `SELECT fanout.publish('in.roles.seq', '{}', message_group => 'a', sequence => 2)`)
	require.NoError(t, err)
	_, err = cons.Exec(b.ctx, `SELECT fanout.publish('in.roles', '{}', priority => 3)`)
	requireSQLState(t, err, "42501")
	var n int64
	require.NoError(t, cons.QueryRow(b.ctx, `SELECT count(*) FROM fanout.read('in.roles.seq')`).Scan(&n))
	require.Zero(t, n, "2 waits for 1")
	require.NoError(t, cons.QueryRow(b.ctx, `SELECT count(*) FROM fanout.sequence_gaps WHERE missing_from = 1`).Scan(&n))
	require.Equal(t, int64(1), n)
	_, err = prod.Exec(b.ctx, `SELECT * FROM fanout.sequence_gaps`)
	requireSQLState(t, err, "42501")
}

// Priority on a reference-mode topic, with pages cut by max_bytes: each
// group drains highest priority first, every message once.
func TestInboxPriorityReferenceBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.prio.ref", "semantics => 'pubsub'", "completion => 'reference'")
	for _, g := range []string{"a", "b"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('in.prio.ref', $1)`, g)
		require.NoError(t, err)
	}
	var want []int64
	byPrio := map[int][]int64{}
	for i := 0; i < 12; i++ {
		p := (i * 7) % 4 * 3 // 0, 9, 6, 3, ...
		byPrio[p] = append(byPrio[p], b.pubPrio(t, b.Pool, "in.prio.ref", p))
	}
	for p := 9; p >= 0; p-- {
		want = append(want, byPrio[p]...)
	}
	for _, g := range []string{"a", "b"} {
		var got []int64
		for len(got) < len(want) {
			rows, err := b.Pool.Query(b.ctx, `SELECT lease_id, message_id FROM fanout.read('in.prio.ref', $1, 'c',
				max_messages => 5, max_bytes => 40)`, g)
			require.NoError(t, err)
			var lease int64
			n := 0
			for rows.Next() {
				var id int64
				require.NoError(t, rows.Scan(&lease, &id))
				got = append(got, id)
				n++
			}
			require.NoError(t, rows.Err())
			require.NotZero(t, n, "group %s drained %d of %d", g, len(got), len(want))
			require.Less(t, n, 5, "max_bytes cuts the page")
			b.ack(t, b.Pool, lease, nil)
		}
		require.Equal(t, want, got, "group %s", g)
	}
}
