package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// count returns the first column of a one-row query as int64.
func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

// dedupeTable is the topic's table of dedupe keys (dedupe_key, message_id,
// created_at), quoted for SQL.
func (b *bundle) dedupeTable(t *testing.T, topic string) string {
	t.Helper()
	return "fanout_data." + pgx.Identifier{b.table(t, topic) + "_dedupe"}.Sanitize()
}

// allDedupe is every topic's dedupe keys as one relation (topic_id,
// dedupe_key, message_id, created_at), to put in a FROM.
func (b *bundle) allDedupe(t *testing.T) string {
	t.Helper()
	var q string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT '(' || coalesce(string_agg(
		format('SELECT %s::bigint AS topic_id, d.* FROM fanout_data.%I d', topic_id, data_table || '_dedupe'), ' UNION ALL '),
		'SELECT NULL::bigint AS topic_id, NULL::text AS dedupe_key, NULL::bigint AS message_id, NULL::timestamptz AS created_at WHERE false')
		|| ')' FROM fanout.topic`).Scan(&q))
	return q
}

// Idempotent publish: a repeated key returns the first message's id and
// inserts nothing; a key repeated inside one batch too; a key whose
// transaction rolled back is free again; so is one past the window.
func TestInboxDedupe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.dedupe")
	pub := func(q querier, key string) int64 {
		var id int64
		require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish('in.dedupe', '{"a":1}', dedupe_key => $1)`, key).Scan(&id))
		return id
	}
	first := pub(b.Pool, "evt-1")
	require.Equal(t, first, pub(b.Pool, "evt-1"), "the second publish of a key returns the first id")
	other := pub(b.Pool, "evt-2")
	require.NotEqual(t, first, other)

	rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish_batch('in.dedupe', ARRAY['{"b":1}', '{"b":2}', '{"b":3}']::jsonb[],
		dedupe_keys => ARRAY['evt-3', 'evt-3', 'evt-1'])`)
	require.NoError(t, err)
	batch, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, batch, 3)
	require.Equal(t, batch[0], batch[1], "a key repeated in one batch gets one id")
	require.Equal(t, first, batch[2], "a key published before keeps its id in a batch")

	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	rolled := pub(tx, "evt-4")
	require.NoError(t, tx.Rollback(b.ctx))
	again := pub(b.Pool, "evt-4")
	require.NotEqual(t, rolled, again, "a key whose publish rolled back is free")

	got := ids(b.read(t, b.Pool, "in.dedupe", nil, "c", 100, "30 seconds"))
	require.ElementsMatch(t, []int64{first, other, batch[0], again}, got, "each key once")

	// Past the window the key makes a new message; maintenance drops old keys.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('in.dedupe', dedupe_window => '50 milliseconds')`)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	require.NotEqual(t, first, pub(b.Pool, "evt-1"), "a key past dedupe_window publishes again")
	// The batch path takes over a key past the window too (evt-2's row is
	// still there: maintenance has not run).
	var batchAgain int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT x FROM fanout.publish_batch('in.dedupe', ARRAY['{"c":1}']::jsonb[],
		dedupe_keys => ARRAY['evt-2']) AS x`).Scan(&batchAgain))
	require.NotEqual(t, other, batchAgain, "a key past dedupe_window publishes again in a batch")
	require.Positive(t, b.count(t, `SELECT fanout._cleanup_bookkeeping(now() + interval '1 second')`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.dedupe")+` WHERE dedupe_key NOT IN ('evt-1', 'evt-2')`))

	// A topic's dedupe table goes with it; fanout.seq_published has no
	// foreign key to the topic: drop_topic deletes its rows itself.
	b.createTopic(t, b.Pool, "in.dropped", "sequence_ordering => true")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish('in.dropped', '{}', message_group => 'a', sequence => 1, dedupe_key => 'k')`)
	require.NoError(t, err)
	topicID := b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = 'in.dropped'`)
	dropped := b.dedupeTable(t, "in.dropped")
	require.Positive(t, b.count(t, `SELECT count(*) FROM `+dropped))
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic('in.dropped', force => true)`)
	require.NoError(t, err)
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, dropped), "its table of keys is dropped")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_published WHERE topic_id = $1`, topicID))
}

// A batch that meets a key claimed by a transaction still open waits for
// it: it gets the first message's id once that one commits, and publishes
// the key itself when that one rolls back; the batch's other keys are
// published either way.
func TestInboxDedupeBatchWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.wait")
	holder, batcher := b.Conn(t), b.Conn(t)
	batch := func(keys ...string) <-chan []int64 {
		out := make(chan []int64, 1)
		go func() {
			rows, err := batcher.Query(b.ctx, `SELECT fanout.publish_batch('in.wait',
				array_fill('{"from":"batch"}'::jsonb, ARRAY[cardinality($1::text[])]), dedupe_keys => $1)`, keys)
			if err != nil {
				out <- nil
				return
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				got = nil
			}
			out <- got
		}()
		return out
	}
	for _, commit := range []bool{true, false} {
		key, other := fmt.Sprintf("held-%v", commit), fmt.Sprintf("free-%v", commit)
		tx, err := holder.Begin(b.ctx)
		require.NoError(t, err)
		var held int64
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT fanout.publish('in.wait', '{"from":"holder"}', dedupe_key => $1)`, key).Scan(&held))
		done := batch(other, key, key)
		b.tWaitBlocked(t, batcher)
		if commit {
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.NoError(t, tx.Rollback(b.ctx))
		}
		got := <-done
		require.Len(t, got, 3, "the batch failed")
		require.Equal(t, got[1], got[2], "a key repeated in the batch gets one id")
		require.NotEqual(t, got[0], got[1])
		if commit {
			require.Equal(t, held, got[1], "the batch gets the committed first message's id")
		} else {
			require.NotEqual(t, held, got[1], "the key of a rolled-back publish is free for the batch")
		}
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.wait")+` WHERE dedupe_key = $1 AND message_id = $2`, key, got[1]))
	}
	ms := b.read(t, b.Pool, "in.wait", nil, "c", 100, "30 seconds")
	require.Len(t, ms, 4, "one message per key: the holder's committed one, the batch's three others")
}

// Concurrent publishers of one key: exactly one message; every publisher
// gets its id (the others wait for the first transaction).
func TestInboxDedupeConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.race")
	const n = 8
	got := make([]int64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := b.Conn(t)
			<-start
			tx, err := conn.Begin(b.ctx)
			require.NoError(t, err)
			require.NoError(t, tx.QueryRow(b.ctx,
				`SELECT fanout.publish('in.race', $1::jsonb, dedupe_key => 'the-key')`, fmt.Sprintf(`{"from":%d}`, i)).Scan(&got[i]))
			require.NoError(t, tx.Commit(b.ctx))
		}()
	}
	close(start)
	wg.Wait()
	for i := 1; i < n; i++ {
		require.Equal(t, got[0], got[i], "publisher %d", i)
	}
	require.Len(t, b.read(t, b.Pool, "in.race", nil, "c", 100, "30 seconds"), 1, "one message")
}

// Delayed delivery: invisible to every group until deliver_at, then
// delivered (attempt 1); it never holds back messages behind it. The
// "not before" half uses delays of an hour, so a slow machine cannot make
// them due during the test.
func TestInboxDelayedDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.later", "semantics => 'pubsub'")
	for _, g := range []string{"a", "b"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('in.later', $1)`, g)
		require.NoError(t, err)
	}
	var farDelay, farAt, now int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('in.later', '{"n":"delayed"}', delay => '1 hour')`).Scan(&farDelay))
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('in.later', '{"n":"at"}', deliver_at => clock_timestamp() + interval '1 hour')`).Scan(&farAt))
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('in.later', '{"n":"now"}')`).Scan(&now))
	require.Equal(t, int64(2), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = 'in.later'`))
	for _, g := range []string{"a", "b"} {
		ms := b.read(t, b.Pool, "in.later", ptr(g), "c", 100, "30 seconds")
		require.Equal(t, []int64{now}, ids(ms), "group %s: only the undelayed message before deliver_at", g)
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
	}

	// Due soon: delivered once due, as a first attempt; the far ones stay.
	var soonDelay, soonAt int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('in.later', '{"n":"soon"}', delay => '1 second')`).Scan(&soonDelay))
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('in.later', '{"n":"soon-at"}', deliver_at => clock_timestamp() + interval '1 second')`).Scan(&soonAt))
	for _, g := range []string{"a", "b"} {
		var got []int64
		require.Eventually(t, func() bool {
			for _, m := range b.read(t, b.Pool, "in.later", ptr(g), "c", 100, "30 seconds") {
				require.Equal(t, int32(1), m.Attempt)
				got = append(got, m.MessageID)
			}
			return len(got) >= 2
		}, time.Minute, 50*time.Millisecond, "group %s: the due messages arrive", g)
		require.ElementsMatch(t, []int64{soonDelay, soonAt}, got, "group %s: delayed messages once due, the far ones not", g)
	}
	require.Equal(t, int64(2), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = 'in.later'`), "the hour-delayed pair is still scheduled")
}

// A run of delayed messages does not make a read come back empty while
// undelayed ones follow it: a page of nothing but delayed messages is
// followed by the next, up to 10 pages per read (bounded work), on plain,
// prioritized and partitioned topics.
func TestInboxDelayedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"in.run", "in.run.prio", "in.run.part"} {
		if topic == "in.run.part" {
			b.createTopic(t, b.Pool, topic, "partitions => 1") // one key partition: the same run
		} else {
			b.createTopic(t, b.Pool, topic)
		}
		if topic == "in.run.prio" {
			first := b.pubPrio(t, b.Pool, topic, 5)
			ms := b.read(t, b.Pool, topic, nil, "c", 10, "30 seconds")
			require.Equal(t, []int64{first}, ids(ms))
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
		after := func(delayed int) []int64 {
			_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch($1, array_fill('{"d":1}'::jsonb, ARRAY[$2::int]),
				delay => '1 hour')`, topic, delayed)
			require.NoError(t, err)
			rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish_batch($1, array_fill('{"d":0}'::jsonb, ARRAY[5]))`, topic)
			require.NoError(t, err)
			undelayed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			return undelayed
		}
		take := func(page int) []int64 {
			ms := b.read(t, b.Pool, topic, nil, "c", page, "30 seconds")
			if len(ms) > 0 {
				b.ack(t, b.Pool, ms[0].LeaseID, nil)
			}
			return ids2(ms)
		}
		undelayed := after(250)
		require.Equal(t, undelayed, take(100), "%s: the undelayed messages behind 250 delayed ones in one read", topic)
		undelayed = after(1000)
		require.Equal(t, undelayed, take(100), "%s: and behind 1,000 (10 pages of 100 used to be the bound)", topic)
		// A read passes 10,000 delayed messages, at least 10 pages and at
		// most 100: with pages of 10, 100 pages (1,000 messages).
		undelayed = after(1000)
		require.Empty(t, take(10), "%s: 100 pages of 10 delayed messages at most per read", topic)
		require.Equal(t, undelayed[:5], take(10), "%s: the next read goes on", topic)
		require.Equal(t, int64(2250), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = $1`, topic))
	}
}

// replay re-delivers what the group already got, by id; it refuses ids the
// group has not been handed yet and ids that are not retained.
func TestInboxReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.replay", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('in.replay', 'g')`)
	require.NoError(t, err)
	id1 := b.publish(t, b.Pool, "in.replay", `{"n":1}`)
	ms := b.read(t, b.Pool, "in.replay", ptr("g"), "c", 100, "30 seconds")
	require.Equal(t, []int64{id1}, ids(ms))
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	id2 := b.publish(t, b.Pool, "in.replay", `{"n":2}`)

	fails := func(state, sql string, args ...any) {
		t.Helper()
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		requireSQLState(t, err, state)
	}
	fails("PGQ03", `SELECT fanout.replay('in.replay', 'g', $1)`, []int64{id2})
	fails("PGQ18", `SELECT fanout.replay('in.replay', 'g', $1)`, []int64{id1 + 1000})
	fails("PGQ03", `SELECT fanout.replay('in.replay', 'g', NULL)`)
	fails("PGQ14", `SELECT fanout.replay('in.replay', 'nobody', $1)`, []int64{id1})
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM fanout.retry`), "refused calls change nothing")

	require.Equal(t, int64(1), b.count(t, `SELECT fanout.replay('in.replay', 'g', $1)`, []int64{id1}))
	ms = b.read(t, b.Pool, "in.replay", ptr("g"), "c", 100, "30 seconds")
	require.ElementsMatch(t, []int64{id1, id2}, ids(ms), "the replayed message comes again, with the new one")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'replay' AND count = 1`))
}

// Every new argument is checked, and a refused call writes nothing.
func TestInboxBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.bad")
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	for _, c := range []struct{ sql, state string }{
		{`SELECT fanout.publish('in.bad', '{}', dedupe_key => '')`, "PGQ03"},
		{`SELECT fanout.publish('in.bad', '{}', dedupe_key => repeat('k', 513))`, "PGQ03"},
		{`SELECT fanout.publish('in.bad', '{}', delay => '1 minute', deliver_at => now())`, "PGQ03"},
		{`SELECT fanout.publish('in.bad', '{}', delay => '-1 second')`, "PGQ03"},
		{`SELECT fanout.publish('in.bad', '{}', delay => '400 days')`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.bad', ARRAY['{}']::jsonb[], dedupe_keys => ARRAY['a', 'b'])`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.bad', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['a', ''])`, "PGQ03"},
		{`SELECT fanout.publish_batch('in.bad', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY[repeat('k', 513), 'b'])`, "PGQ03"},
		{`SELECT fanout.create_topic('in.bad2', dedupe_window => '31 days')`, "PGQ03"},
		{`SELECT fanout.alter_topic('in.bad', dedupe_window => '-1 second')`, "PGQ03"},
	} {
		_, err := b.Pool.Exec(ctx, c.sql)
		requireSQLState(t, err, c.state)
	}
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM `+b.allDedupe(t)+` d`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.topic`))
	require.Empty(t, b.read(t, b.Pool, "in.bad", nil, "c", 100, "30 seconds"))
}

// Cleanup finds expired dedupe keys without an index on created_at: it
// sweeps each topic's table of keys in block ranges, 100 blocks per call,
// topic after topic, over several calls (maint_operations lists it while a
// pass is under way); keys still in their window stay, expired ones go, a
// key taken over meanwhile (made new again) stays, and a topic dropped
// while the pass is under way is passed by.
func TestInboxDedupeSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.sweep.old", "dedupe_window => '1 hour'")
	b.createTopic(t, b.Pool, "in.sweep.gone", "dedupe_window => '1 hour'")
	b.createTopic(t, b.Pool, "in.sweep.new", "dedupe_window => '1 hour'")
	// Enough keys for more than one call's blocks in each table.
	for i := 0; i < 30; i++ {
		for _, topic := range []string{"in.sweep.old", "in.sweep.gone", "in.sweep.new"} {
			_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch($1, array_fill('{}'::jsonb, ARRAY[1000]),
				dedupe_keys => (SELECT array_agg($1 || '-' || $2::int || '-' || g) FROM generate_series(1, 1000) g))`, topic, i)
			require.NoError(t, err)
		}
	}
	oldKeys, newKeys := b.dedupeTable(t, "in.sweep.old"), b.dedupeTable(t, "in.sweep.new")
	for _, tbl := range []string{oldKeys, newKeys} {
		require.Greater(t, b.count(t, `SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint`, tbl),
			int64(200), "each table spans more than two calls' worth of blocks")
	}
	// The old and the dropped topic's keys are 2 hours old as far as cleanup
	// is concerned.
	for _, topic := range []string{"in.sweep.old", "in.sweep.gone"} {
		_, err := b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, topic)+` SET created_at = created_at - interval '2 hours'`)
		require.NoError(t, err)
	}
	// One key of the old topic is published again (taken over: new again).
	var retaken int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT x FROM fanout.publish_batch('in.sweep.old', ARRAY['{}']::jsonb[],
		dedupe_keys => ARRAY['in.sweep.old-0-1']) AS x`).Scan(&retaken))
	calls := 0
	for {
		n := b.count(t, `SELECT fanout._cleanup_bookkeeping()`)
		calls++
		if n == 0 {
			break
		}
		if calls == 1 {
			require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.maint_operations() WHERE func = 'fanout._cleanup_bookkeeping'`),
				"listed while a sweep pass is under way")
			require.Equal(t, b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = 'in.sweep.old'`),
				b.count(t, `SELECT topic_id FROM fanout.dedupe_sweep`), "the pass is in the first topic's table")
			_, err := b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic('in.sweep.gone', force => true)`)
			require.NoError(t, err)
		}
		require.Less(t, calls, 1000)
	}
	require.Greater(t, calls, 4, "a pass takes more than one call per table")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+oldKeys), "the expired keys are gone, the retaken one stays")
	require.Equal(t, retaken, b.count(t, `SELECT message_id FROM `+oldKeys+` WHERE dedupe_key = 'in.sweep.old-0-1'`))
	require.Equal(t, int64(30000), b.count(t, `SELECT count(*) FROM `+newKeys), "keys within their window stay")
	// The pass is over and the next is not due yet: nothing listed.
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL OR topic_id IS NOT NULL`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.maint_operations() WHERE func = 'fanout._cleanup_bookkeeping'`))
	require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.maint_operations(now() + interval '2 hours') WHERE func = 'fanout._cleanup_bookkeeping'`))
}

// A transaction that publishes many keyed batches: the first 8 claim their
// keys in a subtransaction each, the rest with ON CONFLICT (a transaction
// never gets more than 8 subtransactions from pgq); both dedupe alike, in
// the batch and against keys of earlier batches of the same transaction.
func TestInboxDedupeSubxactBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.budget")
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	var first []int64
	for i := 0; i < 12; i++ {
		rows, err := tx.Query(b.ctx, `SELECT fanout.publish_batch('in.budget', array_fill('{}'::jsonb, ARRAY[4]),
			dedupe_keys => ARRAY['k-' || $1::int, 'k-' || $1::int, 'first', 'k-' || ($1::int + 100)])`, i)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, got, 4)
		require.Equal(t, got[0], got[1], "batch %d: a key repeated in the batch gets one id", i)
		require.NotEqual(t, got[0], got[3])
		if i == 0 {
			first = got
		} else {
			require.Equal(t, first[2], got[2], "batch %d: a key of an earlier batch keeps its id", i)
		}
	}
	var used string
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT current_setting('fanout.dedupe_subxacts')`).Scan(&used))
	require.Equal(t, "8", used, "8 subtransactions, then ON CONFLICT")
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(12*2+1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.budget")))
	require.Len(t, b.read(t, b.Pool, "in.budget", nil, "c", 100, "30 seconds"), 12*2+1, "one message per key")
}

// Two batches publishing one key concurrently: the second waits for the
// first (its plain INSERT of the claims meets the first's row), then gets
// the first's id when it commits and publishes the key when it rolls back;
// the second's other keys are published either way.
func TestInboxDedupeBatchVsBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.bvb")
	holder, batcher := b.Conn(t), b.Conn(t)
	for _, commit := range []bool{true, false} {
		key := fmt.Sprintf("shared-%v", commit)
		tx, err := holder.Begin(b.ctx)
		require.NoError(t, err)
		var held int64
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT x FROM fanout.publish_batch('in.bvb', ARRAY['{"from":"holder"}']::jsonb[],
			dedupe_keys => ARRAY[$1]) AS x`, key).Scan(&held))
		done := make(chan []int64, 1)
		go func() {
			rows, err := batcher.Query(b.ctx, `SELECT fanout.publish_batch('in.bvb', array_fill('{"from":"batch"}'::jsonb, ARRAY[3]),
				dedupe_keys => ARRAY['a-' || $1, $1, 'z-' || $1])`, key)
			var got []int64
			if err == nil {
				got, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			}
			if err != nil {
				got = nil
			}
			done <- got
		}()
		b.tWaitBlocked(t, batcher)
		if commit {
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.NoError(t, tx.Rollback(b.ctx))
		}
		got := <-done
		require.Len(t, got, 3, "the batch failed")
		if commit {
			require.Equal(t, held, got[1], "the batch gets the committed first message's id")
		} else {
			require.NotEqual(t, held, got[1], "the key of a rolled-back publish is free for the batch")
		}
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.bvb")+` WHERE dedupe_key = $1 AND message_id = $2`, key, got[1]))
	}
	// The holder's committed message and the batch's two others, then the
	// batch's three (the holder rolled back).
	require.Len(t, b.read(t, b.Pool, "in.bvb", nil, "c", 100, "30 seconds"), 1+2+3, "one message per key")
}

// A dedupe key's limit is 512 characters, not bytes: 512 two-byte
// characters pass on every path (publish, keyed batch, sequenced batch), 513
// are refused with nothing written.
func TestInboxDedupeKeyLengthInCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "in.len")
	b.createTopic(t, b.Pool, "in.len.seq", "sequence_ordering => true")
	for i, sql := range []string{
		`SELECT fanout.publish('in.len', '{}', dedupe_key => repeat('é', $1))`,
		`SELECT fanout.publish_batch('in.len', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['b' || repeat('é', $1 - 1), 'x'])`,
		`SELECT fanout.publish_batch('in.len.seq', ARRAY['{}']::jsonb[], message_groups => ARRAY['a'], sequences => ARRAY[1],
			dedupe_keys => ARRAY['s' || repeat('é', $1 - 1)])`,
	} {
		_, err := b.Pool.Exec(b.ctx, sql, 513)
		requireSQLState(t, err, "PGQ03")
		_, err = b.Pool.Exec(b.ctx, sql, 512)
		require.NoError(t, err, "path %d", i)
	}
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.len")+` WHERE octet_length(dedupe_key) > 512`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "in.len.seq")))
	require.Equal(t, int64(3), b.qMessageCount(t, "in.len"))
}
