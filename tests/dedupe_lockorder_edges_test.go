package tests

// A hostile review of the lock order changes of the table of dedupe keys per
// topic: fanout.alter_topic locking its row FOR NO KEY UPDATE (was FOR
// UPDATE), every publish path claiming its keys before it marks the topic
// prioritized, and the dedupe sweep of fanout._cleanup_bookkeeping locking
// each topic row FOR KEY SHARE SKIP LOCKED before it sizes its table.

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// loAsync runs f on its own goroutine; the result arrives on the channel.
func loAsync(f func() error) chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func (b *bundle) loKparts(t *testing.T, topic, group string) int64 {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM fanout.kpart k JOIN fanout.consumer_group g USING (group_id)
		JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1 AND g.group_name = $2`, topic, group)
}

// A raise of a partitioned topic's partition count racing a new group's
// subscribe, in both orders. fanout._kpart_cursors relies on the group
// insert's foreign key check (FOR KEY SHARE on the topic row) waiting for
// an alter_topic holding the row; FOR NO KEY UPDATE does not make it wait,
// so the new group gets cursors for the old count only and never reads the
// new partitions.
func TestDedupeLockOrderAlterRaiseVsSubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "lo.kp", "semantics => 'pubsub'", "partitions => 2")
	_, err := b.Pool.Exec(b.ctx, `SELECT * FROM fanout.subscribe('lo.kp', 'g1')`)
	require.NoError(t, err)
	c1, c2 := b.Conn(t), b.Conn(t)

	// 1. The alter holds the row, the subscribe runs.
	tx, err := c1.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.alter_topic('lo.kp', partitions => 4)`)
	require.NoError(t, err)
	done := loAsync(func() error {
		_, e := c2.Exec(b.ctx, `SELECT * FROM fanout.subscribe('lo.kp', 'g2')`)
		return e
	})
	waited := b.tWaitBlockedOrDone(t, c2, done)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	t.Logf("subscribe waited for the alter: %v", waited)
	require.Equal(t, int64(4), b.loKparts(t, "lo.kp", "g1"))
	require.Equal(t, int64(4), b.loKparts(t, "lo.kp", "g2"), "g2 subscribed while P was raised 2 -> 4")

	// 2. The subscribe holds its new group, the alter runs.
	tx, err = c2.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT * FROM fanout.subscribe('lo.kp', 'g3')`)
	require.NoError(t, err)
	done = loAsync(func() error {
		_, e := c1.Exec(b.ctx, `SELECT fanout.alter_topic('lo.kp', partitions => 6)`)
		return e
	})
	waited = b.tWaitBlockedOrDone(t, c1, done)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	t.Logf("alter waited for the subscribe: %v", waited)

	require.Equal(t, int64(6), b.loKparts(t, "lo.kp", "g1"))
	require.Equal(t, int64(6), b.loKparts(t, "lo.kp", "g2"), "g2 subscribed while P was raised 2 -> 4 (then 6)")
	require.Equal(t, int64(6), b.loKparts(t, "lo.kp", "g3"), "g3 subscribed while P was raised 4 -> 6")
}

// Two alters of one topic still exclude each other and both changes stay;
// an alter and a drop wait for each other in either order; a create of the
// same name during an alter fails at once (PGQ02); an alter that
// regenerates the insert functions with keyed publishers and a reader in
// flight waits for none of them, and their transactions go on.
func TestDedupeLockOrderAlterVsAlterDropCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"lo.a1", "lo.a2", "lo.a3"} {
		b.createTopic(t, b.Pool, topic)
	}
	c1, c2, c3 := b.Conn(t), b.Conn(t), b.Conn(t)

	// alter vs alter
	tx, err := c1.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.alter_topic('lo.a1', retention => '3 hours')`)
	require.NoError(t, err)
	done := loAsync(func() error {
		_, e := c2.Exec(b.ctx, `SELECT fanout.alter_topic('lo.a1', max_attempts => 7)`)
		return e
	})
	b.tWaitBlocked(t, c2)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.topic
		WHERE topic = 'lo.a1' AND retention = '3 hours' AND max_attempts = 7`))

	// create of the same name while an alter holds the row
	tx, err = c1.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.alter_topic('lo.a1', retention => '4 hours')`)
	require.NoError(t, err)
	_, err = c2.Exec(b.ctx, `SELECT fanout.create_topic('lo.a1')`)
	requireSQLState(t, err, "PGQ02")
	// alter holds, drop waits
	done = loAsync(func() error {
		_, e := c2.Exec(b.ctx, `SELECT fanout.drop_topic('lo.a1', force => true)`)
		return e
	})
	b.tWaitBlocked(t, c2)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.topic WHERE topic = 'lo.a1'`))

	// drop holds, alter waits and finds no topic
	tx, err = c1.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.drop_topic('lo.a2', force => true)`)
	require.NoError(t, err)
	done = loAsync(func() error {
		_, e := c2.Exec(b.ctx, `SELECT fanout.alter_topic('lo.a2', retention => '2 hours')`)
		return e
	})
	b.tWaitBlocked(t, c2)
	require.NoError(t, tx.Commit(b.ctx))
	requireSQLState(t, <-done, "PGQ01")

	// a partitioned topic: regenerate the insert functions with a keyed
	// publisher and a reader in flight
	b.createTopic(t, b.Pool, "lo.a4", "partitions => 2")
	for i := 0; i < 6; i++ {
		b.rvPub(t, b.Pool, "lo.a4", fmt.Sprintf("pre%d", i))
	}
	ptx, err := c1.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = ptx.Rollback(b.ctx) }()
	first := b.rvPub(t, ptx, "lo.a4", "held")
	_, err = rvKeyed(b.ctx, ptx, "lo.a4", rvKeys("hb1", "hb2"))
	require.NoError(t, err)
	rtx, err := c3.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = rtx.Rollback(b.ctx) }()
	got := b.read(t, rtx, "lo.a4", nil, "r", 2, "30 seconds")
	require.NotEmpty(t, got)
	done = loAsync(func() error {
		_, e := c2.Exec(b.ctx, `SELECT fanout.alter_topic('lo.a4', partitions => 5)`)
		return e
	})
	// The alter's cursors (INSERT ... ON CONFLICT DO NOTHING into
	// fanout.kpart) wait for the reader, whose read moved its partitions'
	// cursors; not for the publisher.
	if b.tWaitBlockedOrDone(t, c2, done) {
		var blocker int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT (pg_blocking_pids($1))[1]`, c2.PgConn().PID()).Scan(&blocker))
		require.Equal(t, int(c3.PgConn().PID()), blocker, "the alter waits for the reader only")
		t.Logf("the alter raising P waited for a reader's open transaction")
	}
	require.NoError(t, rtx.Commit(b.ctx))
	require.NoError(t, <-done)
	require.Equal(t, first, b.rvPub(t, ptx, "lo.a4", "held"), "same key, same transaction, after the alter")
	b.rvPub(t, ptx, "lo.a4", "after")
	require.NoError(t, ptx.Commit(b.ctx))
	require.Equal(t, int64(5), b.count(t, `SELECT count(*) FROM fanout.kpart k JOIN fanout.consumer_group g USING (group_id)
		JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'lo.a4'`))
	require.Equal(t, int64(10), b.qMessageCount(t, "lo.a4"))
	b.dpConsistent(t)
}

// A topic's first priority takes the topic row until its transaction ends
// (README, "Inbox"): B publishes the topic's first priority (no key) and
// keeps its transaction open; A publishes key k with a priority: A claims k,
// then waits for B's row; B then publishes k and waits for A. That is the
// documented 40P01: exactly one of the two is aborted, the other goes
// through, and the aborted one, retried, gets the same id for k.
func TestDedupeLockOrderPriorityMarkMirrorDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"single", "batch"} {
		t.Run(path, func(t *testing.T) {
			topic := "lo.mirror." + path
			b.createTopic(t, b.Pool, topic)
			a, bb := b.Conn(t), b.Conn(t)
			tx, err := bb.Begin(b.ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(b.ctx) }()
			_, err = tx.Exec(b.ctx, `SELECT fanout.publish($1, '{}', priority => 5)`, topic)
			require.NoError(t, err)
			publishA := func() (int64, error) {
				if path == "single" {
					var id int64
					err := a.QueryRow(b.ctx, `SELECT fanout.publish($1, '{}', dedupe_key => 'k', priority => 5)`, topic).Scan(&id)
					return id, err
				}
				rows, e := a.Query(b.ctx, `SELECT fanout.publish_batch($1, ARRAY['{}']::jsonb[], dedupe_keys => ARRAY['k'], priority => 5)`, topic)
				if e != nil {
					return 0, e
				}
				got, e := pgx.CollectRows(rows, pgx.RowTo[int64])
				if e != nil {
					return 0, e
				}
				return got[0], nil
			}
			var aid int64
			done := loAsync(func() error {
				var e error
				aid, e = publishA()
				return e
			})
			b.tWaitBlocked(t, a)
			var bid int64
			err = tx.QueryRow(b.ctx, `SELECT fanout.publish($1, '{}', dedupe_key => 'k')`, topic).Scan(&bid)
			if err == nil {
				err = tx.Commit(b.ctx)
			} else {
				_ = tx.Rollback(b.ctx)
			}
			aerr := <-done
			require.True(t, (err == nil) != (aerr == nil), "exactly one of the two is aborted: %v / %v", err, aerr)
			if err != nil {
				requireSQLState(t, err, "40P01")
				require.NoError(t, bb.QueryRow(b.ctx, `SELECT fanout.publish($1, '{}', dedupe_key => 'k')`, topic).Scan(&bid),
					"B retried")
			} else {
				requireSQLState(t, aerr, "40P01")
				aid, aerr = publishA()
				require.NoError(t, aerr, "A retried")
			}
			require.Equal(t, bid, aid, "one message for k")
			require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, topic)))
		})
	}
}

// The prioritized mark: a duplicate keyed priority publish in a session
// that never took an id (currval undefined) neither fails nor marks; a
// takeover past the window marks; a keyed batch of duplicates only; a
// priority with a delivery time; priority order within one transaction whose
// first priority message precedes the mark (a later statement).
func TestDedupeLockOrderPriorityMarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prio := func(topic string) bool {
		return b.count(t, `SELECT prioritized::int FROM fanout.topic WHERE topic = $1`, topic) == 1
	}
	b.createTopic(t, b.Pool, "lo.p1", "dedupe_window => '1 hour'")
	first := b.rvPub(t, b.Pool, "lo.p1", "k")
	fresh := b.Conn(t)
	var dup int64
	require.NoError(t, fresh.QueryRow(b.ctx, `SELECT fanout.publish('lo.p1', '{}', dedupe_key => 'k', priority => 4)`).Scan(&dup))
	require.Equal(t, first, dup)
	require.False(t, prio("lo.p1"), "a duplicate marks nothing")
	// Same session, published k itself (currval = k's id): still no mark.
	same := b.Conn(t)
	own := b.rvPub(t, same, "lo.p1", "own")
	require.NoError(t, same.QueryRow(b.ctx, `SELECT fanout.publish('lo.p1', '{}', dedupe_key => 'own', priority => 4)`).Scan(&dup))
	require.Equal(t, own, dup)
	require.False(t, prio("lo.p1"))
	// Past the window: taken over, marked.
	_, err := b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, "lo.p1")+` SET created_at = now() - interval '2 hours' WHERE dedupe_key = 'k'`)
	require.NoError(t, err)
	var taken int64
	require.NoError(t, fresh.QueryRow(b.ctx, `SELECT fanout.publish('lo.p1', '{}', dedupe_key => 'k', priority => 4)`).Scan(&taken))
	require.Greater(t, taken, first)
	require.True(t, prio("lo.p1"))

	// A batch of duplicates only, with a priority (no message inserted).
	b.createTopic(t, b.Pool, "lo.p2")
	_, err = rvKeyed(b.ctx, b.Pool, "lo.p2", rvKeys("x", "y"))
	require.NoError(t, err)
	_, err = rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('lo.p2', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['x', 'y'], priority => 9)`)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.qMessageCount(t, "lo.p2"))
	t.Logf("a batch of duplicates with a priority marks the topic: %v", prio("lo.p2"))

	// One transaction: plain messages, then a keyed priority (marked after
	// its insert), a keyed batch with a priority, a delayed priority.
	b.createTopic(t, b.Pool, "lo.p3")
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	plain := b.qPublishN(t, tx, "lo.p3", 0, 3)
	var hi int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT fanout.publish('lo.p3', '{}', dedupe_key => 'h', priority => 9)`).Scan(&hi))
	mid, err := rvBatch(b.ctx, tx, `SELECT fanout.publish_batch('lo.p3', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['m1', 'm2'], priority => 5)`)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT fanout.publish('lo.p3', '{}', dedupe_key => 'late', priority => 9, delay => '1 hour')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	require.True(t, prio("lo.p3"))
	got := ids(b.read(t, b.Pool, "lo.p3", nil, "c", 10, "30 seconds"))
	want := append(append([]int64{hi}, mid...), plain...)
	require.Equal(t, want, got)
}

// The sweep over 2,500 topics (empty tables of keys) and four real ones
// with expired keys: a drop, an alter and a keyed publisher in flight on
// three of them. No call waits; the pass passes a topic whose row a drop or
// an alter holds by, and the next pass sweeps it once it committed; each
// call's locks stay bounded; the expired keys of the topics not dropped are
// gone.
func TestDedupeLockOrderSweepManyTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	real := []string{"lo.s1", "lo.s2", "lo.s3", "lo.s4"}
	for _, topic := range real {
		b.createTopic(t, b.Pool, topic, "dedupe_window => '1 hour'")
		_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, topic)+` SELECT 'old' || g, g, now() - interval '2 hours'
			FROM generate_series(1, 3000) g`)
		require.NoError(t, err)
	}
	// 2,500 more topic rows, each with an empty table of keys (cheaper than
	// create_topic; the sweep reads only topic_id, data_table, dedupe_window).
	_, err := b.Pool.Exec(b.ctx, `
		INSERT INTO fanout.topic (topic, semantics, completion, retention, zero_subscription_retention,
			block_writes_without_subscriptions, max_retention, max_attempts, max_payload_bytes, zombie_ttl,
			notify, partition_interval, data_table, seq_name, dedupe_window)
		SELECT 'lo.z' || g, semantics, completion, retention, zero_subscription_retention,
			block_writes_without_subscriptions, max_retention, max_attempts, max_payload_bytes, zombie_ttl,
			notify, partition_interval, 'loz' || g, seq_name, dedupe_window
		FROM fanout.topic, generate_series(1, 2500) g WHERE topic = 'lo.s4'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `DO $$BEGIN FOR i IN 1..2500 LOOP
		EXECUTE format('CREATE TABLE fanout_data.%I (dedupe_key text, message_id bigint, created_at timestamptz)', 'loz' || i || '_dedupe');
		END LOOP; END$$`)
	require.NoError(t, err)

	cd, ca, cp, cs := b.Conn(t), b.Conn(t), b.Conn(t), b.Conn(t)
	dtx, err := cd.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = dtx.Rollback(b.ctx) }()
	_, err = dtx.Exec(b.ctx, `SELECT fanout.drop_topic('lo.s1', force => true)`)
	require.NoError(t, err)
	atx, err := ca.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = atx.Rollback(b.ctx) }()
	_, err = atx.Exec(b.ctx, `SELECT fanout.alter_topic('lo.s2', retention => '5 hours')`)
	require.NoError(t, err)
	ptx, err := cp.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = ptx.Rollback(b.ctx) }()
	b.rvPub(t, ptx, "lo.s3", "fresh")
	_, err = ptx.Exec(b.ctx, `SELECT fanout.publish('lo.s3', '{}', priority => 3)`)
	require.NoError(t, err)

	var results, locks []int64
	untilZero := func() {
		for calls := 0; ; calls++ {
			require.Less(t, calls, 40, "the pass never paused or ended: %v", results)
			var n, nl int64
			done := loAsync(func() error {
				tx, e := cs.Begin(b.ctx)
				if e != nil {
					return e
				}
				defer func() { _ = tx.Rollback(b.ctx) }()
				if e = tx.QueryRow(b.ctx, `SELECT fanout._cleanup_bookkeeping()`).Scan(&n); e != nil {
					return e
				}
				if e = tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()`).Scan(&nl); e != nil {
					return e
				}
				return tx.Commit(b.ctx)
			})
			require.False(t, b.tWaitBlockedOrDone(t, cs, done), "call %d waited for a lock", calls)
			require.NoError(t, <-done)
			results, locks = append(results, n), append(locks, nl)
			if n == 0 {
				return
			}
		}
	}
	// The drop in flight holds lo.s1's row, the alter lo.s2's: the pass
	// passes both by (their keys wait for the next pass; pausing there let
	// a tenant's open transaction stop the sweep of every later topic) and
	// ends, past the publisher still in flight on lo.s3.
	untilZero()
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE topic_id IS NOT NULL OR next_block IS NOT NULL`))
	require.Equal(t, int64(3000), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "lo.s2")+` WHERE dedupe_key LIKE 'old%'`),
		"passed by while altered")
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "lo.s4")+` WHERE dedupe_key LIKE 'old%'`))
	require.NoError(t, dtx.Commit(b.ctx))
	require.NoError(t, atx.Commit(b.ctx))
	require.NoError(t, ptx.Commit(b.ctx))
	// The next pass (as the pass's pace would start it).
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.dedupe_sweep SET pass_started = NULL`)
	require.NoError(t, err)
	untilZero()
	t.Logf("calls: %v, locks held after each: %v", results, locks)
	for _, nl := range locks {
		require.LessOrEqual(t, nl, int64(1050), "locks of one call")
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE topic_id IS NOT NULL OR next_block IS NOT NULL`))
	for _, topic := range []string{"lo.s2", "lo.s3", "lo.s4"} {
		require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, topic)+` WHERE dedupe_key LIKE 'old%'`), topic)
	}
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "lo.s3")))

	// One maintenance round (fanout.run_maintenance, one transaction) over
	// the same topics: the per-call bound is the round's, or not?
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.dedupe_sweep SET pass_started = NULL`)
	require.NoError(t, err)
	tx, err := cs.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT fanout.run_maintenance()`)
	require.NoError(t, err)
	var nl int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()`).Scan(&nl))
	t.Logf("locks held by one run_maintenance round: %d", nl)
	// A drop of the last topic waits for the whole round.
	done := loAsync(func() error {
		_, e := cd.Exec(b.ctx, `SELECT fanout.drop_topic('lo.s4', force => true)`)
		return e
	})
	waited := b.tWaitBlockedOrDone(t, cd, done)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	t.Logf("drop_topic waited for the maintenance round: %v", waited)
	require.LessOrEqual(t, nl, int64(1050), "locks held by one run_maintenance round")
}

// The sweep's DELETE against a keyed publisher taking over two expired keys
// whose rows lie in the other order: the publisher holds key a (taken
// over), the sweep deletes b then waits for a, the publisher then takes
// over b and waits for the sweep: 40P01 for one of them. The sweep waits
// for a publisher's transaction at all.
func TestDedupeLockOrderSweepTakeoverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "lo.t", "dedupe_window => '1 hour'")
	for _, k := range []string{"b", "a"} { // row order: b, then a
		b.rvPub(t, b.Pool, "lo.t", k)
	}
	_, err := b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, "lo.t")+` SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `VACUUM `+b.dedupeTable(t, "lo.t"))
	require.NoError(t, err)
	cp, cs := b.Conn(t), b.Conn(t)
	tx, err := cp.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	b.rvPub(t, tx, "lo.t", "a") // taken over: holds a's row
	done := loAsync(func() error {
		_, e := cs.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping()`)
		return e
	})
	sweepWaited := b.tWaitBlockedOrDone(t, cs, done)
	var perr error
	if sweepWaited {
		var id int64
		perr = tx.QueryRow(b.ctx, `SELECT fanout.publish('lo.t', '{"s":1}', dedupe_key => 'b')`).Scan(&id)
		if perr == nil {
			perr = tx.Commit(b.ctx)
		}
	}
	serr := <-done
	require.NoError(t, perr, "the publisher")
	require.NoError(t, serr, "the sweep")
	require.False(t, sweepWaited, "the sweep waited for a publisher's transaction")
}
