package tests

// Edge cases of the unpartitioned core read path (read, ack, nack,
// extend_lease, read(..., ack =>), _window_scan, _lease_open/_lease_settle)
// with maintenance running in between. Each scenario is an interleaving
// script in the tests/specs format (named sessions, steps in order, boolean
// checks), run by the same runner as TestSpecs. Leases are expired by
// moving expires_at back, maintenance runs with explicit p_now: nothing
// depends on machine speed.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func runCoreEdgeSpec(t *testing.T, body string) {
	t.Helper()
	rot := ""
	for i := 0; i < 5; i++ {
		rot += "m:      SELECT fanout._manage_partitions(now() + interval '1 hour')\n"
	}
	body = strings.ReplaceAll(body, "{ROT}\n", rot)
	body = strings.ReplaceAll(body, "{HB}", ", heartbeat_timeout => '7 days'")
	b := setup(t)
	p := filepath.Join(t.TempDir(), "review.spec")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	s, err := parseSpec(p)
	require.NoError(t, err)
	checker, err := pgconn.Connect(b.ctx, b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = checker.Close(context.Background()) })
	r := &specRun{t: t, ctx: b.ctx, url: b.URL, checker: checker,
		sessions: map[string]*pgconn.PgConn{}, pending: map[string]chan specResult{},
		vars: map[string]string{"db": b.DBName}}
	for _, st := range s.steps {
		r.step(st)
	}
	require.Empty(t, r.pending, "background steps never awaited\n%s", r.trace())
	t.Log(r.trace())
}

var reviewCoreSpecs = map[string]string{
	// 1. A producer transaction (queue + offset pubsub, two groups) stays open
	// across a partition rotation and cleanup with retention 0 while later
	// messages are read and acked; after it commits, rotation refreshes the
	// bound and cleanup runs again BEFORE anyone reads: nothing may be lost.
	"producer_open_across_rotation_and_cleanup": `
# invariant: out-of-order commits are never skipped, across rotation and cleanup
setup:  SELECT fanout.create_topic('q', partition_interval => '1 minute', retention => '0')
setup:  SELECT fanout.create_topic('ps', semantics => 'pubsub', partition_interval => '1 minute', retention => '0')
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'b'{HB})
setup:  SELECT fanout.publish('q', '{"n":1}') + fanout.publish('ps', '{"n":1}')
p:      BEGIN
p:      SELECT fanout.publish('q', '{"n":2}') + fanout.publish('ps', '{"n":2}')
setup:  SELECT fanout.publish('q', '{"n":3}') + fanout.publish('ps', '{"n":3}')
c:      SELECT string_agg(payload->>'n', ',' ORDER BY message_id) || '|' || max(lease_id) FROM fanout.read('q') => cq
check:  SELECT split_part('$cq', '|', 1) = '1,3'
c:      SELECT fanout.ack(split_part('$cq', '|', 2)::bigint)
a:      SELECT string_agg(payload->>'n', ',' ORDER BY message_id) || '|' || max(lease_id) FROM fanout.read('ps', 'a') => ca
check:  SELECT split_part('$ca', '|', 1) = '1,3'
a:      SELECT fanout.ack(split_part('$ca', '|', 2)::bigint)
bb:     SELECT string_agg(payload->>'n', ',' ORDER BY message_id) || '|' || max(lease_id) FROM fanout.read('ps', 'b') => cb
bb:     SELECT fanout.ack(split_part('$cb', '|', 2)::bigint)
{ROT}
m:      SELECT fanout._cleanup_partitions(now() + interval '2 hours')
m:      SELECT fanout.run_maintenance(now())
p:      SELECT fanout.publish('q', '{"n":4}') + fanout.publish('ps', '{"n":4}')
p:      COMMIT
{ROT}
check:  SELECT bool_and(closed_at IS NOT NULL) FROM fanout.partition WHERE part_no = 0
m:      SELECT fanout._cleanup_partitions(now() + interval '4 hours') + fanout._cleanup_partitions(now() + interval '4 hours')
m:      SELECT fanout.run_maintenance(now())
c:      SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('q') => rq
a:      SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('ps', 'a') => ra
bb:     SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('ps', 'b') => rb
check:  SELECT '$rq' = '2,4'
check:  SELECT '$ra' = '2,4'
check:  SELECT '$rb' = '2,4'
check:  SELECT coalesce(sum(lost_messages), 0) = 0 FROM fanout.consumer_group
`,

	// 2. Reference mode: group a acks in an open business transaction while
	// b has acked and cleanup (retention 0) runs; a rolls back. The
	// messages must survive and come back to a.
	"reference_ack_uncommitted_during_cleanup": `
# invariant: reference mode: a message is never deleted before every group it requires acked it
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference', retention => '0', partition_interval => '1 minute')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('r', 'b'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('r', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
a:      SELECT max(lease_id) FROM fanout.read('r', 'a', lease => '1 minute') => la
bb:     SELECT max(lease_id) FROM fanout.read('r', 'b') => lb
{ROT}
check:  SELECT closed_at IS NOT NULL FROM fanout.partition WHERE part_no = 0 ORDER BY topic_id LIMIT 1
bb:     SELECT fanout.ack($lb) = 2
a:      BEGIN
a:      SELECT fanout.ack($la) = 2
m:      SELECT fanout._cleanup_partitions(now() + interval '2 hours') => dropped1
m:      SELECT fanout.run_maintenance(now())
a:      ROLLBACK
setup:  SELECT (SELECT string_agg(group_name || '=' || status || '/lost' || lost_messages, ';') FROM fanout.consumer_group) || ' | parts ' || (SELECT string_agg(part_no || ':' || (closed_at IS NOT NULL) || ':' || (truncated_at IS NOT NULL), ';') FROM fanout.partition) || ' | ev ' || coalesce((SELECT string_agg(kind || ':' || coalesce(group_name,'') || ':' || count, ';') FROM fanout.event_log), '') || ' | jobs ' || coalesce((SELECT string_agg(kind || ':' || status, ';') FROM fanout.bitmap_job), '')
m:      SELECT fanout._cleanup_partitions(now() + interval '2 hours') => dropped2
setup:  SELECT (SELECT string_agg(group_name || '=' || status || '/lost' || lost_messages, ';') FROM fanout.consumer_group) || ' | parts ' || (SELECT string_agg(part_no || ':' || (closed_at IS NOT NULL) || ':' || (truncated_at IS NOT NULL), ';') FROM fanout.partition) || ' | ev ' || coalesce((SELECT string_agg(kind || ':' || coalesce(group_name,'') || ':' || count, ';') FROM fanout.event_log), '') || ' | jobs ' || coalesce((SELECT string_agg(kind || ':' || status, ';') FROM fanout.bitmap_job), '')
check:  SELECT $dropped1 = 0 AND $dropped2 = 0
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
a:      SELECT string_agg(payload->>'n' || ':' || attempt, ',' ORDER BY message_id) FROM fanout.read('r', 'a') => again
check:  SELECT '$again' = '1:2,2:2'
`,

	// 3. read(..., ack => L) whose ack is fenced: the whole call fails
	// (documented), and nothing of the next page is handed out.
	"read_ack_fenced_rolls_back_page": `
# invariant: read(..., ack =>) whose ack fails acks and reads nothing; fencing PGQ11
setup:  SELECT fanout.create_topic('q')
setup:  SELECT count(*) FROM fanout.publish_batch('q', ARRAY['{"n":1}', '{"n":2}', '{"n":3}']::jsonb[])
a:      SELECT max(lease_id) FROM fanout.read('q', consumer => 'a', max_messages => 1, lease => '1 minute') => la
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
bb:     SELECT max(lease_id) || ':' || max(attempt) || ':' || max(payload->>'n') FROM fanout.read('q', consumer => 'b', max_messages => 1) => gb
check:  SELECT split_part('$gb', ':', 2) = '2' AND split_part('$gb', ':', 3) = '1'
a:      SELECT count(*) FROM fanout.read('q', consumer => 'a', max_messages => 5, ack => $la) !! PGQ11
check:  SELECT count(*) = 1 FROM fanout.lease WHERE open_count > 0
c:      SELECT string_agg(payload->>'n' || ':' || attempt, ',' ORDER BY message_id) FROM fanout.read('q', consumer => 'c') => gc
check:  SELECT '$gc' = '2:1,3:1'
bb:     SELECT fanout.ack(split_part('$gb', ':', 1)::bigint) = 1
`,

	// 4. max_bytes smaller than the first message (and an out-of-order commit
	// in the middle): one message per page, each exactly once.
	"max_bytes_smaller_than_first_message": `
# invariant: the first message of a page always comes; no message lost or duplicated under max_bytes
setup:  SELECT fanout.create_topic('q')
setup:  SELECT fanout.publish('q', jsonb_build_object('n', 1, 'pad', repeat('x', 2000)))
p:      BEGIN
p:      SELECT fanout.publish('q', jsonb_build_object('n', 2, 'pad', repeat('y', 3000)))
setup:  SELECT fanout.publish('q', '{"n":3}')
setup:  SELECT fanout.publish('q', '{"n":4}')
r:      SELECT string_agg(payload->>'n', ',') || '|' || max(lease_id) FROM fanout.read('q', max_bytes => 1) => p1
check:  SELECT split_part('$p1', '|', 1) = '1'
r:      SELECT string_agg(payload->>'n', ',') || '|' || max(lease_id) FROM fanout.read('q', max_bytes => 1, ack => split_part('$p1', '|', 2)::bigint) => p2
check:  SELECT split_part('$p2', '|', 1) = '3'
p:      COMMIT
r:      SELECT string_agg(payload->>'n', ',') || '|' || max(lease_id) FROM fanout.read('q', max_bytes => 1, ack => split_part('$p2', '|', 2)::bigint) => p3
r:      SELECT string_agg(payload->>'n', ',') || '|' || max(lease_id) FROM fanout.read('q', max_bytes => 1, ack => split_part('$p3', '|', 2)::bigint) => p4
r:      SELECT coalesce(string_agg(payload->>'n', ','), '') || '|' || coalesce(max(lease_id), 0) FROM fanout.read('q', max_bytes => 1, ack => split_part('$p4', '|', 2)::bigint) => p5
check:  SELECT (ARRAY[split_part('$p3', '|', 1), split_part('$p4', '|', 1)]::text[] @> ARRAY['2','4']) AND split_part('$p5', '|', 1) = ''
check:  SELECT count(*) = 0 FROM fanout.lease WHERE open_count > 0
`,

	// 5a. The lease given to read(..., ack =>) expired (nobody took it): the
	// ack succeeds and the same call does not hand its messages out again.
	// 5b. A competing reader is in the middle of taking the expired lease
	// over (its transaction holds the lease row) when read(..., ack =>)
	// arrives: it waits, then is fenced once the takeover commits.
	"read_ack_lease_expires_midway": `
# invariant: a group never gets a message twice under unexpired leases; fencing PGQ11 for taken-over leases
setup:  SELECT fanout.create_topic('q')
setup:  SELECT count(*) FROM fanout.publish_batch('q', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
a:      SELECT max(lease_id) FROM fanout.read('q', consumer => 'a', max_messages => 1, lease => '1 minute') => la
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
a:      SELECT string_agg(payload->>'n' || ':' || attempt, ',') || '|' || max(lease_id) FROM fanout.read('q', consumer => 'a', ack => $la) => a2
check:  SELECT split_part('$a2', '|', 1) = '2:1'
setup:  SELECT fanout.publish('q', '{"n":3}')
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw(split_part('$a2', '|', 2)::bigint)
bb:     BEGIN
bb:     SELECT string_agg(payload->>'n' || ':' || attempt, ',' ORDER BY message_id) FROM fanout.read('q', consumer => 'b') => b1
check:  SELECT '$b1' = '2:2,3:1'
a&:     SELECT count(*) FROM fanout.read('q', consumer => 'a', ack => split_part('$a2', '|', 2)::bigint)
setup:  DO $$ BEGIN FOR i IN 1..600 LOOP EXIT WHEN EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted); PERFORM pg_sleep(0.05); END LOOP; END $$
check:  SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted)
bb:     COMMIT
await:  a !! PGQ11
check:  SELECT count(*) = 1 FROM fanout.lease WHERE open_count > 0
`,

	// 6. Two groups, one paused; retention 0, rotation and cleanup far ahead
	// (but within zombie_ttl): the paused group keeps everything.
	"paused_group_with_retention_offset": `
# invariant: a committed message is delivered to every group subscribed when it committed (a paused group keeps its position)
setup:  SELECT fanout.create_topic('ps', semantics => 'pubsub', retention => '0', partition_interval => '1 minute')
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'b'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('ps', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
setup:  SELECT fanout.pause('ps', 'b')
a:      SELECT max(lease_id) FROM fanout.read('ps', 'a') => la
a:      SELECT fanout.ack($la) = 2
bb:     SELECT count(*) FROM fanout.read('ps', 'b') => none
check:  SELECT $none = 0
{ROT}
check:  SELECT closed_at IS NOT NULL FROM fanout.partition WHERE part_no = 0 ORDER BY topic_id LIMIT 1
m:      SELECT fanout._cleanup_partitions(now() + interval '2 days')
m:      SELECT fanout.run_maintenance(now())
setup:  SELECT fanout.resume('ps', 'b')
bb:     SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('ps', 'b') => gb
check:  SELECT '$gb' = '1,2'
check:  SELECT lost_messages = 0 FROM fanout.consumer_group WHERE group_name = 'b'
`,

	// 6b. Reference mode: same, and a lease read before the pause cannot be
	// acked while paused (PGQ15, documented); after resume it can.
	"paused_group_with_retention_reference": `
# invariant: reference mode: a message is never deleted before every group it requires acked it
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference', retention => '0', partition_interval => '1 minute')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('r', 'b'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('r', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
bb:     SELECT max(lease_id) FROM fanout.read('r', 'b', max_messages => 1, lease => '1 hour') => lb
setup:  SELECT fanout.pause('r', 'b')
bb:     SELECT fanout.ack($lb) !! PGQ15
a:      SELECT max(lease_id) FROM fanout.read('r', 'a') => la
a:      SELECT fanout.ack($la) = 2
{ROT}
check:  SELECT closed_at IS NOT NULL FROM fanout.partition WHERE part_no = 0 ORDER BY topic_id LIMIT 1
m:      SELECT fanout._cleanup_partitions(now() + interval '2 days')
m:      SELECT fanout.run_maintenance(now())
setup:  SELECT fanout.resume('r', 'b')
bb:     SELECT fanout.ack($lb) = 1
bb:     SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('r', 'b') => gb
check:  SELECT '$gb' = '2'
`,

	// 6c. A paused group past zombie_ttl stops pinning: its loss is counted.
	"paused_group_past_zombie_ttl_counted": `
# invariant: every drop is counted (lost_messages) and logged
setup:  SELECT fanout.create_topic('ps', semantics => 'pubsub', retention => '0', partition_interval => '1 minute', zombie_ttl => '1 day')
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'b'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('ps', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
setup:  SELECT fanout.pause('ps', 'b')
a:      SELECT max(lease_id) FROM fanout.read('ps', 'a') => la
a:      SELECT fanout.ack($la) = 2
{ROT}
check:  SELECT closed_at IS NOT NULL FROM fanout.partition WHERE part_no = 0 ORDER BY topic_id LIMIT 1
m:      SELECT fanout._cleanup_partitions(now() + interval '3 days')
setup:  SELECT fanout.resume('ps', 'b')
bb:     SELECT count(*) FROM fanout.read('ps', 'b') => gb
check:  SELECT $gb + (SELECT lost_messages FROM fanout.consumer_group WHERE group_name = 'b') = 2
`,

	// 7. REPEATABLE READ consumers: read refuses (PGQ09); an RR business
	// transaction whose snapshot predates a takeover acks afterwards: the
	// lease row changed after its snapshot, so 40001 (docs/errors.md), and
	// the retried ack meets PGQ11.
	"repeatable_read_consumer": `
# invariant: fencing: a stale consumer cannot ack what another consumer now holds (40001 under REPEATABLE READ, then PGQ11)
setup:  SELECT fanout.create_topic('q')
setup:  SELECT fanout.publish('q', '{"n":1}')
a:      BEGIN ISOLATION LEVEL REPEATABLE READ
a:      SELECT count(*) FROM fanout.read('q') !! PGQ09
a:      ROLLBACK
a:      SELECT max(lease_id) FROM fanout.read('q', consumer => 'a', lease => '1 minute') => la
a:      BEGIN ISOLATION LEVEL REPEATABLE READ
a:      SELECT count(*) FROM fanout.lease
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
bb:     SELECT max(lease_id) FROM fanout.read('q', consumer => 'b') => lb
a:      SELECT fanout.ack($la) !! 40001
a:      ROLLBACK
a:      SELECT fanout.ack($la) !! PGQ11
bb:     SELECT fanout.ack($lb) = 1
`,

	// 7b. RR business transaction that acks a lease that is not taken over,
	// then commits: fine.
	"repeatable_read_ack_ok": `
# invariant: ack inside the business transaction commits with it
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT fanout.publish('r', '{"n":1}')
a:      SELECT max(lease_id) FROM fanout.read('r', 'a') => la
a:      BEGIN ISOLATION LEVEL REPEATABLE READ
a:      SELECT count(*) FROM fanout.lease
setup:  SELECT fanout.publish('r', '{"n":2}')
a:      SELECT fanout.ack($la) = 1
a:      COMMIT
a:      SELECT string_agg(payload->>'n', ',') FROM fanout.read('r', 'a') => g2
check:  SELECT '$g2' = '2'
`,

	// 8. Foreign leases given to read(..., ack =>) are refused as unknown
	// leases (PGQ10) and change nothing; a queue reader's group name is
	// attribution only.
	"read_ack_foreign_leases": `
# invariant: read(..., ack =>) with a lease of another group or topic is refused as an unknown lease (PGQ10) and changes nothing
setup:  SELECT fanout.create_topic('ps', semantics => 'pubsub')
setup:  SELECT fanout.create_topic('q2')
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('ps', 'b'{HB})
setup:  SELECT fanout.publish('ps', '{"n":1}') + fanout.publish('q2', '{"n":1}')
a:      SELECT max(lease_id) FROM fanout.read('ps', 'a') => la
bb:     SELECT max(lease_id) FROM fanout.read('ps', 'b') => lb
q:      SELECT max(lease_id) FROM fanout.read('q2') => lq
setup:  SELECT fanout.publish('ps', '{"n":2}') + fanout.publish('q2', '{"n":2}')
a:      SELECT count(*) FROM fanout.read('ps', 'a', ack => $lb) !! PGQ10
a:      SELECT count(*) FROM fanout.read('ps', 'a', ack => $lq) !! PGQ10
q:      SELECT count(*) FROM fanout.read('q2', ack => $la) !! PGQ10
a:      SELECT count(*) FROM fanout.read('ps', NULL, ack => $la) !! PGQ10
check:  SELECT count(*) = 3 FROM fanout.lease WHERE open_count = 1
q:      SELECT string_agg(payload->>'n', ',') FROM fanout.read('q2', 'anything', ack => $lq) => q2
check:  SELECT '$q2' = '2'
a:      SELECT string_agg(payload->>'n', ',') FROM fanout.read('ps', 'a', ack => $la) => a2
check:  SELECT '$a2' = '2'
bb:     SELECT string_agg(payload->>'n', ',') FROM fanout.read('ps', 'b', ack => $lb) => b2
check:  SELECT '$b2' = '2'
`,

	// 9. Double ack, partial ack, bad partial ack (PGQ12: nothing settled),
	// nack of a subset, whole-lease ack after it, extend after expiry.
	"partial_ack_nack_subset_extend": `
# invariant: acking again changes nothing; a failed ack settles nothing; nacked messages come back, acked ones never
setup:  SELECT fanout.create_topic('q')
setup:  SELECT count(*) FROM fanout.publish_batch('q', ARRAY['{"n":1}', '{"n":2}', '{"n":3}', '{"n":4}']::jsonb[])
a:      SELECT max(lease_id) || ':' || min(message_id) FROM fanout.read('q', consumer => 'a', lease => '1 minute') => la
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint]) = 1
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint]) = 0
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint + 1, 99999]) !! PGQ12
check:  SELECT open_count = 3 FROM fanout.lease WHERE lease_id = fanout._lease_raw(split_part('$la', ':', 1)::bigint)
a:      SELECT fanout.nack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint + 1], retry_in => '0') = 1
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint) = 2
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint) = 0
a:      SELECT fanout.nack(split_part('$la', ':', 1)::bigint) = 0
bb:     SELECT string_agg(payload->>'n' || ':' || attempt, ',') || '|' || max(lease_id) FROM fanout.read('q', consumer => 'b', lease => '1 minute') => gb
check:  SELECT split_part('$gb', '|', 1) = '2:2'
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw(split_part('$gb', '|', 2)::bigint)
bb:     SELECT fanout.extend_lease(split_part('$gb', '|', 2)::bigint, '1 minute') > now() + interval '50 seconds'
c:      SELECT count(*) FROM fanout.read('q', consumer => 'c') => gc
check:  SELECT $gc = 0
bb:     SELECT fanout.ack(split_part('$gb', '|', 2)::bigint) = 1
check:  SELECT count(*) = 0 FROM fanout.lease WHERE open_count > 0
check:  SELECT count(*) = 0 FROM fanout.check_consistency()
`,

	// 9b. Partial ack, then expiry and takeover of the rest: the stale holder
	// can neither ack the rest nor extend; re-acking its acked one is 0.
	"partial_ack_then_takeover": `
# invariant: fencing (PGQ11) for acks of taken-over leases; acked messages are never redelivered
setup:  SELECT fanout.create_topic('q')
setup:  SELECT count(*) FROM fanout.publish_batch('q', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
a:      SELECT max(lease_id) || ':' || min(message_id) FROM fanout.read('q', consumer => 'a', lease => '1 minute') => la
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint]) = 1
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw(split_part('$la', ':', 1)::bigint)
bb:     SELECT string_agg(payload->>'n' || ':' || attempt, ',') || '|' || max(lease_id) FROM fanout.read('q', consumer => 'b') => gb
check:  SELECT split_part('$gb', '|', 1) = '2:2'
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint) !! PGQ11
a:      SELECT fanout.extend_lease(split_part('$la', ':', 1)::bigint, '1 minute') !! PGQ11
a:      SELECT fanout.nack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint + 1]) !! PGQ11
a:      SELECT fanout.ack(split_part('$la', ':', 1)::bigint, ARRAY[split_part('$la', ':', 2)::bigint]) = 0
bb:     SELECT fanout.ack(split_part('$gb', '|', 2)::bigint) = 1
`,

	// 10. Reference mode, earliest backfill with a producer transaction open
	// across the subscription (writing to the topic). Design §3.3: an open
	// transaction delays only its own messages. Here the late group gets
	// nothing at all (history, and n1 committed after its subscription)
	// while p is open; after p commits it gets everything once.
	"reference_backfill_with_straggler": `
# invariant: documented deviation (docs/architecture.md, README "Reference mode"): a backfilling reference-mode group waits for producer transactions open on its topic, then gets everything once
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('r', ARRAY['{"n":"h1"}', '{"n":"h2"}']::jsonb[])
p:      BEGIN
p:      SELECT fanout.publish('r', '{"n":"p"}')
s:      SELECT status FROM fanout.subscribe('r', 'late', 'earliest')
setup:  SELECT fanout.publish('r', '{"n":"n1"}')
m:      SELECT fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step()
m:      SELECT fanout.run_maintenance(now())
a:      SELECT string_agg(payload->>'n', ',' ORDER BY message_id) || '|' || max(lease_id) FROM fanout.read('r', 'a') => a1
check:  SELECT split_part('$a1', '|', 1) = 'h1,h2,n1'
l:      SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('r', 'late') => l1
p:      COMMIT
m:      SELECT fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step()
a:      SELECT coalesce(string_agg(payload->>'n', ','), '') FROM fanout.read('r', 'a', ack => split_part('$a1', '|', 2)::bigint) => a2
l:      SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('r', 'late') => l2
check:  SELECT '$a2' = 'p' AND '$l1' = '' AND '$l2' = 'h1,h2,p,n1'
`,

	// 10b. Same, but the long transaction only holds an xid on an unrelated
	// table: must not stall the late group.
	"reference_backfill_unrelated_long_tx": `
# invariant: a transaction that keeps an xid open on any table delays only its own messages
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference')
setup:  CREATE TABLE other(x int)
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT count(*) FROM fanout.publish_batch('r', ARRAY['{"n":"h1"}', '{"n":"h2"}']::jsonb[])
p:      BEGIN
p:      INSERT INTO other VALUES (1)
s:      SELECT status FROM fanout.subscribe('r', 'late', 'earliest')
setup:  SELECT fanout.publish('r', '{"n":"n1"}')
m:      SELECT fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step()
l:      SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('r', 'late') => l1
check:  SELECT '$l1' = 'h1,h2,n1'
p:      COMMIT
`,

	// 13. Reference mode: both groups declared dead by maintenance far ahead
	// (not pausing), one of them with an ack open; it rolls back, the group
	// revives by reading: the messages come back or are counted lost.
	"reference_dead_then_revived": `
# invariant: every committed message reaches every group unless dropped; each drop is counted (lost_messages)
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference', retention => '0', partition_interval => '1 minute')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'b')
setup:  SELECT count(*) FROM fanout.publish_batch('r', ARRAY['{"n":1}', '{"n":2}']::jsonb[])
a:      SELECT max(lease_id) FROM fanout.read('r', 'a', lease => '1 minute') => la
bb:     SELECT max(lease_id) FROM fanout.read('r', 'b') => lb
{ROT}
bb:     SELECT fanout.ack($lb) = 2
a:      BEGIN
a:      SELECT fanout.ack($la) = 2
m:      SELECT fanout.run_maintenance(now() + interval '2 hours')
a:      ROLLBACK
m:      SELECT fanout.run_maintenance(now() + interval '2 hours')
m:      SELECT fanout._cleanup_partitions(now() + interval '2 hours')
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
a:      SELECT count(*) FROM fanout.read('r', 'a') => first
m:      SELECT fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step()
m:      SELECT fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step() + fanout._bitmap_step()
a:      SELECT count(*) FROM fanout.read('r', 'a') => second
check:  SELECT $first + $second + (SELECT lost_messages FROM fanout.consumer_group WHERE group_name = 'a') >= 2
`,

	// 11. A stale holder acks after its taken-over slot was cleaned up by
	// bookkeeping (one hour after the takeover closed the slot) while the new
	// holder still holds the message under an unexpired lease.
	"stale_ack_after_bookkeeping_cleanup": `
# invariant: a stale consumer cannot ack what another consumer now holds: PGQ11
setup:  SELECT fanout.create_topic('q')
setup:  SELECT fanout.publish('q', '{"n":1}')
a:      SELECT max(lease_id) FROM fanout.read('q', consumer => 'a', lease => '1 minute') => la
setup:  UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = fanout._lease_raw($la)
bb:     SELECT max(lease_id) FROM fanout.read('q', consumer => 'b', lease => '24 hours') => lb
m:      SELECT fanout._cleanup_bookkeeping(now() + interval '2 hours')
check:  SELECT expires_at > now() FROM fanout.lease WHERE lease_id = fanout._lease_raw($lb)
a:      SELECT fanout.ack($la) !! PGQ11
`,

	// 12. read-then-publish in one transaction, reference mode with two
	// groups, across a rotation.
	"reference_read_then_publish_across_rotation": `
# invariant: a message published by the reader's own transaction is delivered once that transaction commits, to every group
setup:  SELECT fanout.create_topic('r', semantics => 'pubsub', completion => 'reference', partition_interval => '1 minute', retention => '0')
setup:  SELECT count(*) FROM fanout.subscribe('r', 'a'{HB})
setup:  SELECT count(*) FROM fanout.subscribe('r', 'b'{HB})
setup:  SELECT fanout.publish('r', '{"n":"first"}')
w:      BEGIN
w:      SELECT max(lease_id) FROM fanout.read('r', 'a', max_messages => 1) => l1
w:      SELECT fanout.publish('r', '{"n":"followup"}')
{ROT}
w:      SELECT count(*) FROM fanout.read('r', 'a', ack => $l1) => own
w:      COMMIT
check:  SELECT $own = 0
m:      SELECT fanout.run_maintenance(now())
setup:  SELECT (SELECT string_agg(group_name || '=' || status || '/lost' || lost_messages, ';') FROM fanout.consumer_group) || ' | parts ' || (SELECT string_agg(part_no || ':' || (closed_at IS NOT NULL) || ':' || (truncated_at IS NOT NULL), ';') FROM fanout.partition) || ' | ev ' || coalesce((SELECT string_agg(kind || ':' || coalesce(group_name,'') || ':' || count, ';') FROM fanout.event_log), '') || ' | jobs ' || coalesce((SELECT string_agg(kind || ':' || status, ';') FROM fanout.bitmap_job), '')
a:      SELECT coalesce(string_agg(payload->>'n', ','), '') FROM fanout.read('r', 'a') => ga
bb:     SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY message_id), '') FROM fanout.read('r', 'b') => gb
check:  SELECT '$ga' = 'followup' AND '$gb' = 'first,followup'
`,
}

func TestCoreEdges(t *testing.T) {
	t.Parallel()
	for name, body := range reviewCoreSpecs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runCoreEdgeSpec(t, body)
		})
	}
}
