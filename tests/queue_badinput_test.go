package tests

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// qDigest is a fingerprint of everything pgq stores in the database: the
// catalog rows and every table in fanout_data (messages, reference-mode
// completion rows), in text order. Bad input must leave it
// unchanged (docs/design.md §3.8: no partial state).
func (b *bundle) qDigest(t *testing.T) string {
	t.Helper()
	var d string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT md5(concat_ws(' | ',
		    (SELECT string_agg(x::text, ',' ORDER BY x.topic_id) FROM fanout.topic x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.group_id) FROM fanout.consumer_group x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.lease_id) FROM fanout.lease x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.group_id, x.message_id) FROM fanout.retry x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.group_id, x.message_id) FROM fanout.dead_letter x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.topic_id, x.part_no) FROM fanout.partition x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.group_id, x.consumer) FROM fanout.member x),
		    (SELECT string_agg(x::text, ',' ORDER BY x.event_id) FROM fanout.event_log x),
		    (SELECT string_agg(c.relname || '=' ||
		                       (xpath('/row/c/text()', query_to_xml(format(
		                           'SELECT count(*) || %L || coalesce(md5(string_agg(m::text, %L ORDER BY m::text)), %L) AS c FROM fanout_data.%I m',
		                           ':', ',', '',
		                           c.relname), false, true, '')))[1]::text, ',' ORDER BY c.relname)
		     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		     WHERE n.nspname = 'fanout_data' AND c.relkind IN ('r', 'p'))))`).Scan(&d))
	return d
}

// Every bad call raises its documented SQLSTATE and changes nothing.
func TestQueueBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "bad.input"
	b.createTopic(t, b.Pool, topic, "max_payload_bytes => 100")
	kept := b.publish(t, b.Pool, topic, `{"keep":1}`)

	// fails runs sql, expects SQLSTATE state, and checks that nothing changed.
	fails := func(t *testing.T, state, sql string, args ...any) {
		t.Helper()
		before := b.qDigest(t)
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		require.Error(t, err, sql)
		require.Equal(t, state, qState(err), "%s: %v", sql, err)
		require.Equal(t, before, b.qDigest(t), "%s left partial state", sql)
	}

	t.Run("unknown topic PGQ01", func(t *testing.T) {
		for _, sql := range []string{
			"SELECT fanout.publish('nope', '{}')",
			"SELECT fanout.publish_batch('nope', ARRAY['{}']::jsonb[])",
			"SELECT * FROM fanout.read('nope')",
			"SELECT fanout.alter_topic('nope', max_attempts => 3)",
			"SELECT fanout.drop_topic('nope')",
			"SELECT fanout.replay_dead_letters('nope', NULL, ARRAY[1::bigint])",
			"SELECT fanout.purge_dead_letters('nope', NULL, '1 day')",
		} {
			fails(t, "PGQ01", sql)
		}
	})

	t.Run("NULL topic PGQ03, empty topic PGQ04", func(t *testing.T) {
		fails(t, "PGQ03", "SELECT fanout.create_topic(NULL)")
		fails(t, "PGQ03", "SELECT fanout.publish(NULL, '{}')")
		fails(t, "PGQ03", "SELECT * FROM fanout.read(NULL)")
		fails(t, "PGQ04", "SELECT fanout.create_topic('')")
		fails(t, "PGQ04", "SELECT fanout.create_topic('   ')")
		fails(t, "PGQ04", "SELECT fanout.create_topic(E'tab\\there')")
	})

	t.Run("names are data, never identifiers", func(t *testing.T) {
		names := []string{
			strings.Repeat("n", 300),
			strings.Repeat("é", 512),
			`x'; DROP TABLE fanout.topic; --`,
			`a"b"; DROP SCHEMA fanout_data CASCADE; --`,
			`Mixed Case.With Spaces/and\backslash`,
		}
		for _, name := range names {
			id := b.createTopic(t, b.Pool, name)
			require.Equal(t, id, b.createTopic(t, b.Pool, name), "idempotent")
			mid := b.publish(t, b.Pool, name, `{"name":"data"}`)
			var got string
			require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT topic FROM fanout.topics WHERE topic_id = $1", id).Scan(&got))
			require.Equal(t, name, got, "the name round-trips exactly")
			ms := b.read(t, b.Pool, name, nil, name, 10, "1 minute")
			require.Equal(t, []int64{mid}, ids(ms))
			require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
			var consumer string
			require.NoError(t, b.Pool.QueryRow(b.ctx,
				"SELECT consumer FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)", ms[0].LeaseID).Scan(&consumer))
			require.Equal(t, name, consumer, "consumer names are data too")
		}
		var tables int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname IN ('fanout', 'fanout_data') AND c.relname IN ('topic', 'm1', 'm1_p0')`).Scan(&tables))
		require.Equal(t, 3, tables, "nothing was dropped by a name")
		fails(t, "PGQ04", "SELECT fanout.create_topic($1)", strings.Repeat("n", 513))
		fails(t, "PGQ04", "SELECT * FROM fanout.read($1, consumer => '')", topic)
		fails(t, "PGQ04", "SELECT * FROM fanout.read($1, consumer => $2)", topic, strings.Repeat("c", 513))
	})

	t.Run("payload and headers PGQ05 PGQ06 PGQ03", func(t *testing.T) {
		big := `{"x":"` + strings.Repeat("y", 200) + `"}`
		fails(t, "PGQ05", "SELECT fanout.publish($1, $2::jsonb)", topic, big)
		fails(t, "PGQ06", "SELECT fanout.publish($1, '{}', '[1,2]')", topic)
		fails(t, "PGQ06", "SELECT fanout.publish($1, '{}', '\"text\"')", topic)
		fails(t, "PGQ03", "SELECT fanout.publish($1, NULL)", topic)
		fails(t, "PGQ04", "SELECT fanout.publish($1, '{}', '{}', '')", topic)
		// One bad element: nothing of the batch is written.
		fails(t, "PGQ05", "SELECT fanout.publish_batch($1, ARRAY['{}', '{}', $2::jsonb, '{}'])", topic, big)
		fails(t, "PGQ06", `SELECT fanout.publish_batch($1, ARRAY['{}', '{}', '{}']::jsonb[],
		                                         ARRAY['{}', '{}', '[]']::jsonb[])`, topic)
		fails(t, "PGQ03", "SELECT fanout.publish_batch($1, ARRAY['{}', NULL, '{}']::jsonb[])", topic)
		fails(t, "PGQ03", "SELECT fanout.publish_batch($1, NULL)", topic)
		// Mismatched array lengths.
		fails(t, "PGQ03", "SELECT fanout.publish_batch($1, ARRAY['{}', '{}']::jsonb[], ARRAY['{}']::jsonb[])", topic)
		fails(t, "PGQ03", "SELECT fanout.publish_batch($1, ARRAY['{}', '{}']::jsonb[], NULL, ARRAY['g'])", topic)
		// Exactly at the limit is fine.
		var size int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT pg_column_size('{"x":"yy"}'::jsonb)`).Scan(&size))
		require.LessOrEqual(t, size, 100)
	})

	t.Run("read arguments PGQ03 and isolation PGQ09", func(t *testing.T) {
		for _, max := range []string{"0", "-1", "NULL", "10001"} {
			fails(t, "PGQ03", "SELECT * FROM fanout.read($1, max_messages => "+max+")", topic)
		}
		for _, lease := range []string{"'0'", "'-1 second'", "NULL", "'25 hours'"} {
			fails(t, "PGQ03", "SELECT * FROM fanout.read($1, lease => "+lease+")", topic)
		}
		conn := b.Conn(t)
		for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
			before := b.qDigest(t)
			tx, err := conn.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			_, err = readMsgs(b.ctx, tx, topic, nil, "c", 10, "1 minute")
			requireSQLState(t, err, "PGQ09")
			require.NoError(t, tx.Rollback(b.ctx))
			require.Equal(t, before, b.qDigest(t))
		}
		// After all that the message is still there, on its first delivery.
		ms := b.read(t, b.Pool, topic, nil, "c", 10, "1 second")
		require.Equal(t, []int64{kept}, ids(ms))
		require.Equal(t, int32(1), ms[0].Attempt)
		lease := ms[0].LeaseID

		t.Run("lease calls PGQ03 PGQ10 PGQ12", func(t *testing.T) {
			fails(t, "PGQ10", "SELECT fanout.ack(987654321)")
			fails(t, "PGQ10", "SELECT fanout.nack(987654321)")
			fails(t, "PGQ10", "SELECT fanout.extend_lease(987654321, '1 minute')")
			fails(t, "PGQ03", "SELECT fanout.ack(NULL)")
			fails(t, "PGQ12", "SELECT fanout.ack($1, ARRAY[$2::bigint, 987654321])", lease, kept)
			fails(t, "PGQ12", "SELECT fanout.nack($1, ARRAY[987654321::bigint])", lease)
			fails(t, "PGQ03", "SELECT fanout.ack($1, ARRAY[NULL::bigint])", lease)
			fails(t, "PGQ03", "SELECT fanout.nack($1, NULL, '-1 second')", lease)
			for _, by := range []string{"'0'", "'-1 minute'", "NULL", "'25 hours'"} {
				fails(t, "PGQ03", "SELECT fanout.extend_lease($1, "+by+")", lease)
			}
			require.Equal(t, 1, b.ack(t, b.Pool, lease, []int64{kept}), "the lease is intact")
		})
	})

	t.Run("create_topic settings PGQ02 PGQ03 and aliases", func(t *testing.T) {
		id := b.createTopic(t, b.Pool, "settings", "max_attempts => 3")
		require.Equal(t, id, b.createTopic(t, b.Pool, "settings", "max_attempts => 3"), "same settings, same id")
		require.Equal(t, id, b.createTopic(t, b.Pool, "settings", "'QUEUE'", "'offset'", "max_attempts => 3"))
		fails(t, "PGQ02", "SELECT fanout.create_topic('settings', max_attempts => 4)")
		fails(t, "PGQ02", "SELECT fanout.create_topic('settings', 'pubsub', max_attempts => 3)")
		fails(t, "PGQ03", "SELECT fanout.create_topic('s2', 'fifo')")
		fails(t, "PGQ03", "SELECT fanout.create_topic('s2', NULL)")
		fails(t, "PGQ03", "SELECT fanout.create_topic('s2', 'pubsub', 'bitmap')")
		fails(t, "PGQ03", "SELECT fanout.create_topic('s2', 'queue', 'reference')")
		for _, opt := range []string{"max_attempts => 0", "max_payload_bytes => 0", "retention => '-1 hour'",
			"max_retention => '1 hour'", "partition_interval => '10 seconds'", "zombie_ttl => '0'", "notify => NULL"} {
			fails(t, "PGQ03", "SELECT fanout.create_topic('s2', "+opt+")")
		}
		for _, c := range []struct{ name, sem, comp, wantSem, wantComp string }{
			{"alias.queue", "QUEUE", "OFFSET", "queue", "offset"},
			{"alias.pubsub", "PUB_SUB", "OFFSET_WATERMARK", "pubsub", "offset"},
			{"alias.mixed", "Pub_Sub", "offset_Watermark", "pubsub", "offset"},
			{"alias.ref", "pubsub", "REFERENCE_COUNTING", "pubsub", "reference"},
		} {
			b.createTopic(t, b.Pool, c.name, "'"+c.sem+"'", "'"+c.comp+"'")
			var sem, comp string
			require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT semantics, completion FROM fanout.topics WHERE topic = $1",
				c.name).Scan(&sem, &comp))
			require.Equal(t, c.wantSem, sem, c.name)
			require.Equal(t, c.wantComp, comp, c.name)
		}
	})

	t.Run("alter_topic PGQ03", func(t *testing.T) {
		b.createTopic(t, b.Pool, "alter.me")
		for _, opt := range []string{"max_attempts => 0", "max_attempts => 1001", "max_payload_bytes => -1",
			"retention => '-1 hour'", "max_retention => '1 hour'", "partition_interval => '1 second'",
			"zombie_ttl => '-1 day'"} {
			fails(t, "PGQ03", "SELECT fanout.alter_topic('alter.me', "+opt+")")
		}
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('alter.me', max_attempts => 9)")
		require.NoError(t, err)
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT max_attempts FROM fanout.topics WHERE topic = 'alter.me'").Scan(&n))
		require.Equal(t, 9, n)
	})

	t.Run("drop_topic PGQ08 and force", func(t *testing.T) {
		b.createTopic(t, b.Pool, "drop.me")
		b.publish(t, b.Pool, "drop.me", `{}`)
		fails(t, "PGQ08", "SELECT fanout.drop_topic('drop.me')")
		ms := b.read(t, b.Pool, "drop.me", nil, "c", 10, "1 minute")
		require.Len(t, ms, 1)
		fails(t, "PGQ08", "SELECT fanout.drop_topic('drop.me')") // leased, not acked
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
		var ok bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.drop_topic('drop.me')").Scan(&ok))
		require.True(t, ok, "a drained topic drops without force")

		id := b.createTopic(t, b.Pool, "drop.force")
		b.qPublishN(t, b.Pool, "drop.force", 0, 10)
		fails(t, "PGQ08", "SELECT fanout.drop_topic('drop.force', false)")
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.drop_topic('drop.force', force => true)").Scan(&ok))
		require.True(t, ok)
		var left int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT (SELECT count(*) FROM fanout.topic WHERE topic IN ('drop.me', 'drop.force'))
			     + (SELECT count(*) FROM fanout.consumer_group WHERE topic_id = $1)
			     + (SELECT count(*) FROM fanout.partition WHERE topic_id = $1)
			     + (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			        WHERE n.nspname = 'fanout_data' AND c.relname LIKE 'm' || $1 || '%')`, id).Scan(&left))
		require.Zero(t, left, "no trace of the dropped topics")
		fails(t, "PGQ01", "SELECT fanout.publish('drop.force', '{}')")
	})

	t.Run("dead-letter calls PGQ20 PGQ03", func(t *testing.T) {
		fails(t, "PGQ20", "SELECT fanout.replay_dead_letters($1, NULL, ARRAY[$2::bigint])", topic, kept)
		fails(t, "PGQ03", "SELECT fanout.replay_dead_letters($1, NULL, NULL)", topic)
		fails(t, "PGQ03", "SELECT fanout.replay_dead_letters($1, NULL, ARRAY[NULL::bigint])", topic)
		fails(t, "PGQ03", "SELECT fanout.purge_dead_letters($1, NULL, '-1 day')", topic)
		fails(t, "PGQ03", "SELECT fanout.purge_dead_letters($1, NULL, NULL)", topic)
	})

	t.Run("pubsub topic blocking writes PGQ07", func(t *testing.T) {
		b.createTopic(t, b.Pool, "blocked", "'pubsub'", "block_writes_without_subscriptions => true")
		fails(t, "PGQ07", "SELECT fanout.publish('blocked', '{}')")
		fails(t, "PGQ07", "SELECT fanout.publish_batch('blocked', ARRAY['{}']::jsonb[])")
	})

	t.Run("wrong types are PostgreSQL's own errors", func(t *testing.T) {
		fails(t, "22P02", "SELECT fanout.publish($1, 'not json')", topic)
		fails(t, "22P02", "SELECT fanout.publish($1, '{}', '{bad')", topic)
		fails(t, "22P02", "SELECT * FROM fanout.read($1, max_messages => 'ten')", topic)
		fails(t, "22P02", "SELECT fanout.ack('one')")
		fails(t, "22007", "SELECT * FROM fanout.read($1, lease => 'forever')", topic)
		fails(t, "42883", "SELECT fanout.publish($1, '{}'::jsonb, '{}'::jsonb, 'g', true, 'k', now(), '1 s', 1, 2, 'extra')", topic)
	})
}
