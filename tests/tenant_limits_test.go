package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Every bounded argument refuses an absurd value with its documented code
// and changes nothing. (Before the bounds, heartbeat_timeout => '178000000
// years', partition_interval => '100000 years', max_retention => '178000000
// years', nack(retry_in => '1000 years'), 10 MB error texts and endless
// lease extensions were all accepted.)
func TestLimitsAbsurdValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "lim.q")
	b.createTopic(t, b.Pool, "lim.ps", "'pubsub'")
	fails := func(t *testing.T, state, sql string, args ...any) {
		t.Helper()
		before := b.qDigest(t)
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		require.Error(t, err, sql)
		require.Equal(t, state, qState(err), "%s: %v", sql, err)
		require.Equal(t, before, b.qDigest(t), "%s left partial state", sql)
	}
	for _, opt := range []string{
		"retention => '178000000 years'", "retention => '3651 days'",
		"zero_subscription_retention => '4000 years'",
		"max_retention => '178000000 years'", "max_retention => '3651 days'",
		"zombie_ttl => '4000 years'", "partition_interval => '100000 years'", "partition_interval => '366 days'",
		"max_attempts => 1001", "max_payload_bytes => 104857601",
	} {
		fails(t, "PGQ03", "SELECT fanout.create_topic('lim.new', "+opt+")")
		fails(t, "PGQ03", "SELECT fanout.alter_topic('lim.q', "+opt+")")
	}
	for _, opt := range []string{
		"heartbeat_timeout => '178000000 years'", "heartbeat_timeout => '8 days'",
		"dead_after_misses => 1001", "max_backfill => 1000000000001",
	} {
		fails(t, "PGQ03", "SELECT fanout.subscribe('lim.ps', 'g', "+opt+")")
	}
	for _, mb := range []string{"0", "-1", "NULL", "536870913"} {
		fails(t, "PGQ03", "SELECT * FROM fanout.read('lim.q', max_bytes => "+mb+")")
	}
	// The highest accepted values work.
	b.createTopic(t, b.Pool, "lim.max", "'pubsub'", "retention => '3650 days'", "max_retention => '3650 days'",
		"zero_subscription_retention => '3650 days'", "zombie_ttl => '3650 days'", "partition_interval => '365 days'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('lim.max', 'g', heartbeat_timeout => '7 days',
		dead_after_misses => 1000, max_backfill => 1000000000)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.run_maintenance(now() + interval '3650 days')")
	require.NoError(t, err, "maintenance computes with the largest settings")

	// Leases: retry_in, error text, extend_by and the total lifetime.
	b.qPublishN(t, b.Pool, "lim.q", 0, 2)
	ms := b.read(t, b.Pool, "lim.q", nil, "c", 1, "1 minute")
	lease := ms[0].LeaseID
	fails(t, "PGQ03", "SELECT fanout.nack($1, retry_in => '1000 years')", lease)
	fails(t, "PGQ03", "SELECT fanout.nack($1, retry_in => '8 days')", lease)
	fails(t, "PGQ03", "SELECT fanout.nack($1, error => repeat('e', 10000000))", lease)
	fails(t, "PGQ03", "SELECT fanout.nack($1, error => repeat('e', 8193))", lease)
	for i := 0; i < 6; i++ { // 1 minute + 6 x 24 hours: within 7 days
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.extend_lease($1, '24 hours')", lease)
		require.NoError(t, err, "extension %d", i+1)
	}
	fails(t, "PGQ22", "SELECT fanout.extend_lease($1, '24 hours')", lease)
	require.Equal(t, 1, b.qNack(t, b.Pool, lease, nil, ptr("7 days"), strings.Repeat("e", 8192)))

	// Groups per topic: 1000, then PGQ22; subscribing an existing group again is fine.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('lim.ps', 'g' || i) FROM generate_series(1, 1000) i")
	require.NoError(t, err)
	fails(t, "PGQ22", "SELECT fanout.subscribe('lim.ps', 'one-too-many')")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('lim.ps', 'g7')")
	require.NoError(t, err)

	// Members per group: 10,000 (filled directly), then a new consumer name
	// is refused by read and heartbeat; known members and acks still work.
	_, err = b.Pool.Exec(b.ctx, `
		INSERT INTO fanout.member (group_id, consumer, last_seen)
		SELECT g.group_id, 'm' || i, now() FROM fanout.consumer_group g
		JOIN fanout.topic t USING (topic_id), generate_series(1, 10000) i WHERE t.topic = 'lim.q'`)
	require.NoError(t, err)
	fails(t, "PGQ22", "SELECT * FROM fanout.read('lim.q', consumer => 'newcomer')")
	fails(t, "PGQ22", "SELECT fanout.heartbeat('lim.q', NULL, 'newcomer')")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.heartbeat('lim.q', NULL, 'm5')")
	require.NoError(t, err)
	ms = b.read(t, b.Pool, "lim.q", nil, "m6", 10, "1 minute")
	require.NotEmpty(t, ms)
	require.Equal(t, len(ms), b.ack(t, b.Pool, ms[0].LeaseID, nil))

	// Intervals that only select (older_than) cannot overflow either.
	for _, sql := range []string{
		"SELECT fanout.purge_dead_letters('lim.q', NULL, '178000000 years')",
		"SELECT count(*) FROM fanout.stuck_messages('178000000 years')",
		"SELECT fanout.force_complete_orphaned('lim.q', '178000000 years')",
	} {
		_, err := b.Pool.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}
}

// One poisoned topic (settings no API call accepts any more, written into
// the catalog directly as an older install could have them) does not stop
// maintenance of the others: rotation and reclaim go on, the failure is
// logged in fanout.event_log, and maint_operations() and fanout.groups
// keep working. (Before, every one of them failed with 22008.)
func TestMaintenancePoisonedTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"good", "poison"} {
		b.createTopic(t, b.Pool, topic, "partition_interval => '1 minute'", "retention => '1 minute'",
			"zero_subscription_retention => '1 minute'", "max_retention => '1 hour'")
		b.qPublishN(t, b.Pool, topic, 0, 5)
		require.Len(t, b.qDrain(t, b.Pool, topic, "c", 100), 5)
	}
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.topic SET partition_interval = '100000 years',
		max_retention = '178000000 years', retention = '178000000 years', zombie_ttl = '178000000 years'
		WHERE topic = 'poison'`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.consumer_group SET heartbeat_timeout = '178000000 years'`)
	require.NoError(t, err)

	// Rotation is two steps in two transactions, cleanup a third.
	for i := 0; i < 4; i++ {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.run_maintenance(now() + interval '2 days')")
		require.NoError(t, err, "round %d", i)
	}
	var goodParts, poisonParts int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT count(*) FILTER (WHERE t.topic = 'good' AND p.part_no = 0),
		       count(*) FILTER (WHERE t.topic = 'poison' AND p.part_no = 0)
		FROM fanout.partition p JOIN fanout.topic t USING (topic_id)`).Scan(&goodParts, &poisonParts))
	require.Zero(t, goodParts, "the good topic rotated and reclaimed its first partition")
	require.Equal(t, 1, poisonParts, "the poisoned topic was skipped")
	var logged int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT count(*) FROM fanout.event_log WHERE kind = 'maintenance_failed' AND topic = 'poison'
		  AND detail->>'function' = 'fanout._manage_partitions' AND detail->>'sqlstate' = '22008'`).Scan(&logged))
	require.Equal(t, 1, logged, "logged once, not once per round")
	for _, sql := range []string{
		"SELECT count(*) FROM fanout.maint_operations(now() + interval '2 days')",
		"SELECT count(*) FROM fanout.groups",
		"SELECT count(*) FROM fanout.groups_near_timeout()",
	} {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, sql).Scan(&n), sql)
	}
	// The good topic still works end to end.
	id := b.publish(t, b.Pool, "good", `{"after":"maintenance"}`)
	require.Equal(t, []int64{id}, ids(b.qDrain(t, b.Pool, "good", "c", 10)))
}

// max_payload_bytes measures the uncompressed message: a 52 MB payload that
// compresses to well under 1 MiB and a 50 MB header are refused on a 1 MiB
// topic (before, the compressed size was measured and headers not at all).
func TestPayloadSizeUncompressed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "sizes") // max_payload_bytes 1 MiB
	conn := b.Conn(t)
	// A stored (hence compressed) 52 MB value, passed on without decompressing.
	_, err := conn.Exec(b.ctx, `CREATE TEMP TABLE big AS SELECT jsonb_build_object('x', repeat('a', 52 << 20)) AS v`)
	require.NoError(t, err)
	var stored int
	require.NoError(t, conn.QueryRow(b.ctx, "SELECT pg_column_size(v) FROM big").Scan(&stored))
	require.Less(t, stored, 1<<20, "it compresses below the limit")
	before := b.qDigest(t)
	for _, sql := range []string{
		"SELECT fanout.publish('sizes', (SELECT v FROM big))",
		"SELECT fanout.publish_batch('sizes', ARRAY[(SELECT v FROM big)])",
		"SELECT fanout.publish('sizes', '{}', jsonb_build_object('h', repeat('b', 50 << 20)))",
		"SELECT fanout.publish_batch('sizes', ARRAY['{}'::jsonb], ARRAY[jsonb_build_object('h', repeat('b', 50 << 20))])",
		"SELECT fanout.publish('sizes', jsonb_build_object('x', repeat('a', 700000)), jsonb_build_object('h', repeat('b', 700000)))",
	} {
		_, err := conn.Exec(b.ctx, sql)
		requireSQLState(t, err, "PGQ05")
	}
	require.Equal(t, before, b.qDigest(t))
	// Payload + headers + message_group just under the limit is fine.
	_, err = conn.Exec(b.ctx, `SELECT fanout.publish('sizes', jsonb_build_object('x', repeat('a', 500000)),
		jsonb_build_object('h', repeat('b', 500000)), 'grp')`)
	require.NoError(t, err)
}

// read(max_bytes) bounds a page by bytes and always returns at least one
// message; pages bounded that way lose and repeat nothing.
func TestReadMaxBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "bytes")
	rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish('bytes', jsonb_build_object('n', i, 'pad', repeat('p', 100000)))
		FROM generate_series(1, 10) i`)
	require.NoError(t, err)
	published, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	page := func(maxBytes int) []int64 {
		rows, err := b.Pool.Query(b.ctx, `SELECT message_id, lease_id FROM fanout.read('bytes', max_messages => 100,
			lease => '1 hour', max_bytes => $1)`, maxBytes)
		require.NoError(t, err)
		var got []int64
		var lease int64
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id, &lease))
			got = append(got, id)
		}
		require.NoError(t, rows.Err())
		if len(got) > 0 {
			require.Equal(t, len(got), b.ack(t, b.Pool, lease, nil))
		}
		return got
	}
	var all []int64
	p := page(350000) // each message is a little over 100,000 bytes
	require.Len(t, p, 3, "three messages fit in 350,000 bytes")
	all = append(all, p...)
	p = page(1)
	require.Len(t, p, 1, "a page always holds at least one message")
	all = append(all, p...)
	p = page(16 << 20)
	require.Len(t, p, 6, "the default-sized budget takes the rest")
	all = append(all, p...)
	require.Empty(t, page(16<<20))
	require.Equal(t, published, all, "every message once, in order")
}

// The two group names whose hashtext() is -2^31 subscribe and read (before,
// abs(hashtext()) overflowed and every read raised 22003), and a session
// reading many groups keeps one short idle-hint setting (before, one
// setting per group slowed reads down after thousands of groups).
func TestOverflowNamesAndSessionSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "hash", "'pubsub'")
	conn := b.Conn(t)
	for _, g := range []string{"grp-8RkJ8k", "grp-dXcS3k"} {
		var h int64
		require.NoError(t, conn.QueryRow(b.ctx, "SELECT hashtext($1)", g).Scan(&h))
		require.Equal(t, int64(-2147483648), h, g)
		_, err := conn.Exec(b.ctx, "SELECT fanout.subscribe('hash', $1)", g)
		require.NoError(t, err)
	}
	id := b.publish(t, b.Pool, "hash", `{}`)
	for _, g := range []string{"grp-8RkJ8k", "grp-dXcS3k"} {
		ms := b.read(t, conn, "hash", ptr(g), "c", 10, "1 minute")
		require.Equal(t, []int64{id}, ids(ms), g)
		require.Empty(t, b.read(t, conn, "hash", ptr(g), "c", 10, "1 minute"), g)
		require.Empty(t, b.read(t, conn, "hash", ptr(g), "c", 10, "1 minute"), "idle peek path: %s", g)
	}
	_, err := conn.Exec(b.ctx, "SELECT fanout.subscribe('hash', 'many' || i) FROM generate_series(1, 100) i")
	require.NoError(t, err)
	for i := 1; i <= 100; i++ {
		require.Empty(t, b.read(t, conn, "hash", ptr(fmt.Sprintf("many%d", i)), "c", 10, "1 minute"))
	}
	var keys int
	require.NoError(t, conn.QueryRow(b.ctx,
		`SELECT cardinality(string_to_array(current_setting('fanout.idle'), ' '))`).Scan(&keys))
	require.Equal(t, 32, keys, "one setting with the 32 most recent idle groups")
}

// Names are stored in NFC: the composed and decomposed spellings are one
// topic (and one group); names that are blank once invisible characters
// are removed are refused. (Before, both spellings made two topics and
// names of only U+00A0, U+200B or U+2028 were accepted.)
func TestNamesNormalized(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nfc, nfd := "caf\u00e9", "cafe\u0301"
	id := b.createTopic(t, b.Pool, nfc, "'pubsub'")
	require.Equal(t, id, b.createTopic(t, b.Pool, nfd, "'pubsub'"), "one topic")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, $2)", nfd, "gr\u00fcn")
	require.NoError(t, err)
	mid := b.publish(t, b.Pool, nfd, `{}`)
	ms := b.read(t, b.Pool, nfc, ptr("gru\u0308n"), "c", 10, "1 minute")
	require.Equal(t, []int64{mid}, ids(ms))
	var topics, groups int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM fanout.topic),
		(SELECT count(*) FROM fanout.consumer_group)`).Scan(&topics, &groups))
	require.Equal(t, 1, topics)
	require.Equal(t, 1, groups)
	for _, name := range []string{"\u00a0", "\u200b", "\u2028", " \u200b\u00a0\ufeff ", "\u3000"} {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.create_topic($1)", name)
		requireSQLState(t, err, "PGQ04")
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, $2)", nfc, name)
		requireSQLState(t, err, "PGQ04")
	}
}

// message_status says before_start for a message published before a
// 'latest' group joined, and subscribing again reports the same
// effective_start_message_id as the first subscribe (before: acked/passed,
// and 0).
func TestStatusBeforeStartAndResubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "st", "'pubsub'")
	old := b.publish(t, b.Pool, "st", `{"old":true}`)
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe('st', 'late')")
	require.NoError(t, err)
	var first int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT effective_start_message_id FROM fanout.subscribe('st', 'early', 'earliest')").Scan(&first))
	require.Equal(t, old, first)
	var again *int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT effective_start_message_id FROM fanout.subscribe('st', 'early', 'earliest')").Scan(&again))
	require.NotNil(t, again)
	require.Equal(t, first, *again)
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT effective_start_message_id FROM fanout.subscribe('st', 'late')").Scan(&again))
	require.Nil(t, again, "latest: no start message")

	status := func(group string, id int64) (string, bool) {
		var st string
		var passed bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT status, passed FROM fanout.message_status('st', $1) WHERE group_name = $2", id, group).Scan(&st, &passed))
		return st, passed
	}
	st, passed := status("late", old)
	require.Equal(t, "before_start", st)
	require.True(t, passed)
	st, _ = status("early", old)
	require.Equal(t, "pending", st)
	fresh := b.publish(t, b.Pool, "st", `{}`)
	st, passed = status("late", fresh)
	require.Equal(t, "pending", st)
	require.False(t, passed)
}

// drop_topic(force) under a running publisher and reader: calls that come
// in while the drop waits get PGQ01 once it committed (before: 42P01 naming
// an internal table, or 23503 from heartbeat).
func TestDropTopicDuringUse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ name, sql string }{
		{"publish", "SELECT fanout.publish('victim', '{}')"},
		{"publish_batch", "SELECT fanout.publish_batch('victim', ARRAY['{}']::jsonb[])"},
		{"read", "SELECT * FROM fanout.read('victim')"},
		{"heartbeat", "SELECT fanout.heartbeat('victim', NULL, 'c')"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.createTopic(t, b.Pool, "victim")
			b.publish(t, b.Pool, "victim", `{}`)
			holder, dropper, late := b.Conn(t), b.Conn(t), b.Conn(t)
			tx, err := holder.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, c.sql) // in use by an open transaction
			require.NoError(t, err)

			dropDone := make(chan error, 1)
			go func() {
				_, err := dropper.Exec(b.ctx, "SELECT fanout.drop_topic('victim', force => true)")
				dropDone <- err
			}()
			b.tWaitBlocked(t, dropper)
			lateDone := make(chan error, 1)
			go func() {
				_, err := late.Exec(b.ctx, c.sql)
				lateDone <- err
			}()
			// The late call either waits for the drop and then finds no
			// topic, or (its advisory key not yet taken by the drop, which
			// takes the topic's 32 keys in turn) runs before the drop, maybe
			// waiting for the holder first (a read on the group row): never
			// an error about a vanished table or group row.
			if b.tWaitBlockedOrDone(t, late, lateDone) {
				require.NoError(t, tx.Commit(b.ctx))
				require.NoError(t, <-dropDone)
				if err := <-lateDone; err != nil {
					requireSQLState(t, err, "PGQ01")
				}
			} else {
				require.NoError(t, <-lateDone, "a call that ran before the drop")
				require.NoError(t, tx.Commit(b.ctx))
				require.NoError(t, <-dropDone)
			}
			_, err = late.Exec(b.ctx, c.sql)
			requireSQLState(t, err, "PGQ01")
		})
	}
}

// tWaitBlocked waits until the backend of conn waits for a lock.
func (b *bundle) tWaitBlocked(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	pid := conn.PgConn().PID()
	for {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case <-b.ctx.Done():
			t.Fatal("the call never waited for the lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tWaitBlockedOrDone waits until the backend of conn waits for a lock (true)
// or its call, which reports on done, has ended (false; the result stays in
// done).
func (b *bundle) tWaitBlockedOrDone(t *testing.T, conn *pgx.Conn, done chan error) bool {
	t.Helper()
	pid := conn.PgConn().PID()
	for {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid).Scan(&waiting))
		if waiting {
			return true
		}
		select {
		case err := <-done:
			done <- err
			return false
		case <-b.ctx.Done():
			t.Fatal("the call neither waited for a lock nor ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A reference-mode bitmap job that keeps failing is marked failed and
// logged, and the other topics' jobs go on (before, it was picked first on
// every call and every call failed).
func TestMaintenancePoisonedBitmapJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"r.poison", "r.good"} {
		b.createTopic(t, b.Pool, topic, "'pubsub'", "'reference'")
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, 'first')", topic)
		require.NoError(t, err)
		b.qPublishN(t, b.Pool, topic, 0, 5)
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, 'late', 'earliest')", topic)
		require.NoError(t, err)
	}
	// A job row no step can make progress with (written directly).
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.bitmap_job j SET batch_size = 0
		FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id)
		WHERE g.group_id = j.group_id AND t.topic = 'r.poison'`)
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._bitmap_step()").Scan(&n), "step %d", i)
		if n == 0 {
			break
		}
	}
	status := func(topic string) string {
		var st string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT backfill_status FROM fanout.groups
			WHERE topic = $1 AND group_name = 'late'`, topic).Scan(&st))
		return st
	}
	require.Equal(t, "completed", status("r.good"))
	require.Equal(t, "failed", status("r.poison"))
	var logged int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.event_log
		WHERE kind = 'maintenance_failed' AND topic = 'r.poison' AND detail->>'function' = 'fanout._bitmap_step'`).Scan(&logged))
	require.Equal(t, 1, logged)
	require.Len(t, b.read(t, b.Pool, "r.good", ptr("late"), "c", 10, "1 minute"), 5)
}

// Users of one topic on different backends each hold ACCESS SHARE on the
// topic's message table (fanout._enter: a relation lock, which takes the
// lock manager's fast path, and which no tenant without privileges on
// fanout_data can take by name); drop_topic waits for every one of them.
func TestDropTopicWaitsForEveryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "spread")
	b.publish(t, b.Pool, "spread", `{}`)
	holders := []*pgx.Conn{b.Conn(t), b.Conn(t)}
	var txs []pgx.Tx
	var pids []uint32
	for _, c := range holders {
		tx, err := c.Begin(b.ctx)
		require.NoError(t, err)
		// What every call of the topic does first (only that: a publish or
		// read would also hold locks the drop waits for anyway).
		_, err = tx.Exec(b.ctx, "SELECT fanout._enter('spread', 'consume')")
		require.NoError(t, err)
		txs = append(txs, tx)
		pids = append(pids, c.PgConn().PID())
	}
	var users, advisory int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(DISTINCT pid) FILTER (WHERE locktype = 'relation'
		AND relation = (SELECT format('fanout_data.%I', data_table)::regclass FROM fanout.topic WHERE topic = 'spread')
		AND mode = 'AccessShareLock' AND granted), count(*) FILTER (WHERE locktype = 'advisory')
		FROM pg_locks WHERE pid = ANY ($1)`, pids).Scan(&users, &advisory))
	require.Equal(t, 2, users, "both users of the topic hold its table")
	require.Zero(t, advisory, "and no advisory lock")

	dropper := b.Conn(t)
	_, err := dropper.Exec(b.ctx, "SET lock_timeout = '200ms'")
	require.NoError(t, err)
	for i, tx := range txs {
		_, err = dropper.Exec(b.ctx, "SELECT fanout.drop_topic('spread', force => true)")
		requireSQLState(t, err, "55P03") // waits for the holders still open
		require.NoError(t, tx.Commit(b.ctx), "holder %d", i)
	}
	_, err = dropper.Exec(b.ctx, "SELECT fanout.drop_topic('spread', force => true)")
	require.NoError(t, err)
}
