package tests

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Reference (bitmap) completion mode (docs/design.md §1.1): per-message required and
// completed group sets, batched backfill and dead-group release.

func (b *bundle) refTopic(t *testing.T, topic string, opts ...string) {
	t.Helper()
	b.createTopic(t, b.Pool, topic, append([]string{"semantics => 'pubsub'", "completion => 'REFERENCE_COUNTING'"}, opts...)...)
}

// bits returns, for one message, the groups it requires and the groups that
// completed it, plus the message status.
func (b *bundle) bits(t *testing.T, topic string, id int64) (required, completed []string, status string) {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx,
		"SELECT group_name, required, completed, message_status FROM fanout.message_status($1, $2)", topic, id)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var g string
		var r, c bool
		require.NoError(t, rows.Scan(&g, &r, &c, &status))
		if r {
			required = append(required, g)
		}
		if c {
			completed = append(completed, g)
		}
	}
	require.NoError(t, rows.Err())
	sort.Strings(required)
	sort.Strings(completed)
	return required, completed, status
}

// runJobs drives bitmap jobs (backfill, release) until none has work left.
func (b *bundle) runJobs(t *testing.T) int {
	t.Helper()
	total := 0
	for i := 0; i < 10000; i++ {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._bitmap_step()").Scan(&n))
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("bitmap jobs did not finish")
	return total
}

func (b *bundle) backfill(t *testing.T, group string) (status string, processed, total *int64) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT backfill_status, backfill_processed, backfill_total FROM fanout.groups WHERE group_name = $1",
		group).Scan(&status, &processed, &total))
	return status, processed, total
}

func (b *bundle) readAck(t *testing.T, topic, group string) []int64 {
	t.Helper()
	return sorted(b.drain(t, topic, ptr(group)))
}

func TestReferenceRequiredSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "ref")
	b.subscribe(t, "ref", "A")
	m1 := b.publish(t, b.Pool, "ref", `{"m":1}`)
	b.subscribe(t, "ref", "B")
	m2 := b.publish(t, b.Pool, "ref", `{"m":2}`)
	req, _, st := b.bits(t, "ref", m1)
	require.Equal(t, []string{"A"}, req)
	require.Equal(t, "pending", st)
	req, _, _ = b.bits(t, "ref", m2)
	require.Equal(t, []string{"A", "B"}, req)
	require.Equal(t, []int64{m1, m2}, b.readAck(t, "ref", "A"))
	require.Equal(t, []int64{m2}, b.readAck(t, "ref", "B"), "B gets only what requires it")

	// A queue topic message needs exactly one ack.
	b.createTopic(t, b.Pool, "q")
	q := b.publish(t, b.Pool, "q", `{}`)
	ms := b.read(t, b.Pool, "q", nil, "w", 10, "1 minute")
	require.Equal(t, []int64{q}, ids(ms))
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	require.Empty(t, b.read(t, b.Pool, "q", ptr("other-group-name"), "w2", 10, "1 minute"))
}

func TestReferenceCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "ref")
	for _, g := range []string{"A", "B", "C"} {
		b.subscribe(t, "ref", g)
	}
	id := b.publish(t, b.Pool, "ref", `{}`)
	leases := map[string]int64{}
	for _, g := range []string{"A", "B", "C"} {
		ms := b.read(t, b.Pool, "ref", ptr(g), g+"1", 10, "1 minute")
		require.Len(t, ms, 1)
		leases[g] = ms[0].LeaseID
	}
	want := []struct {
		completed []string
		status    string
	}{{[]string{"A"}, "pending"}, {[]string{"A", "B"}, "pending"}, {[]string{"A", "B", "C"}, "completed"}}
	for i, g := range []string{"A", "B", "C"} {
		require.Equal(t, 1, b.ack(t, b.Pool, leases[g], nil))
		require.Equal(t, 0, b.ack(t, b.Pool, leases[g], nil), "double ack is idempotent")
		req, done, st := b.bits(t, "ref", id)
		require.Equal(t, []string{"A", "B", "C"}, req)
		require.Equal(t, want[i].completed, done, "after %s acked", g)
		require.Equal(t, want[i].status, st)
	}

	// A paused group's ack is refused; an unknown lease is refused.
	id2 := b.publish(t, b.Pool, "ref", `{}`)
	ms := b.read(t, b.Pool, "ref", ptr("A"), "a", 10, "1 minute")
	require.Equal(t, []int64{id2}, ids(ms))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.pause('ref', 'A')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID)
	requireSQLState(t, err, "PGQ15")
	_, done, _ := b.bits(t, "ref", id2)
	require.Empty(t, done, "a refused ack changes nothing")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.ack(987654321)")
	requireSQLState(t, err, "PGQ10")
}

func TestReferenceConcurrentSubscribeVersusPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for iter := 0; iter < 20; iter++ {
		topic := fmt.Sprintf("race%d", iter)
		b.refTopic(t, topic)
		b.subscribe(t, topic, "base")
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				if _, err := b.Pool.Exec(b.ctx, "SELECT fanout.publish($1, '{}')", topic); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := b.Pool.Exec(b.ctx, "SELECT * FROM fanout.subscribe($1, 'new')", topic); err != nil {
				errs <- err
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		delivered := map[int64]bool{}
		for _, id := range b.drain(t, topic, ptr("new")) {
			delivered[id] = true
		}
		var all []int64
		for id := int64(1); id <= 30; id++ {
			all = append(all, id)
		}
		for _, id := range all {
			req, _, _ := b.bits(t, topic, id)
			requiresNew := false
			for _, g := range req {
				requiresNew = requiresNew || g == "new"
			}
			require.Equal(t, requiresNew, delivered[id],
				"iteration %d message %d: delivered to the new group exactly when it requires it", iter, id)
		}
	}
}

func TestReferenceBackfill(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "bf")
	b.subscribe(t, "bf", "A")
	msgs := b.publishN(t, "bf", 25)

	_, _ = b.subscribe(t, "bf", "late", "start_position => 'earliest'", "backfill_batch => 10")
	st, _, _ := b.backfill(t, "late")
	require.Equal(t, "not_started", st)
	require.Empty(t, b.read(t, b.Pool, "bf", ptr("late"), "l", 100, "1 minute"), "no reads before the backfill is done")
	b.runJobs(t)
	st, processed, total := b.backfill(t, "late")
	require.Equal(t, "completed", st)
	require.Equal(t, int64(25), *processed)
	require.Equal(t, int64(25), *total)
	require.Equal(t, msgs, b.readAck(t, "bf", "late"))
	status, _ := b.subscribe(t, "bf", "late", "start_position => 'earliest'")
	require.Equal(t, "active", status)
	st, _, _ = b.backfill(t, "late")
	require.Equal(t, "completed", st, "subscribing again does not backfill again")
	require.Zero(t, b.runJobs(t))

	// max_backfill keeps the newest messages.
	b.subscribe(t, "bf", "capped", "start_position => 'earliest'", "max_backfill => 10")
	b.runJobs(t)
	require.Equal(t, msgs[15:], b.readAck(t, "bf", "capped"))

	// Cancel after the first batch, restart: resumes from the checkpoint.
	b.subscribe(t, "bf", "resumable", "start_position => 'earliest'", "backfill_batch => 10")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._bitmap_step()").Scan(&n))
	require.Equal(t, 10, n)
	var cancelled bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.cancel_backfill('bf', 'resumable')").Scan(&cancelled))
	require.True(t, cancelled)
	require.Zero(t, b.runJobs(t), "a cancelled backfill does no work")
	st, processed, _ = b.backfill(t, "resumable")
	require.Equal(t, "cancelled", st)
	require.Equal(t, int64(10), *processed)
	var restarted bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.restart_backfill('bf', 'resumable')").Scan(&restarted))
	require.True(t, restarted)
	b.runJobs(t)
	st, processed, _ = b.backfill(t, "resumable")
	require.Equal(t, "completed", st)
	require.Equal(t, int64(25), *processed, "resumed from the checkpoint, not from the start")
	for _, id := range msgs {
		req, _, _ := b.bits(t, "bf", id)
		require.Contains(t, req, "resumable")
	}

	// Five concurrent steppers on one job: every bit set once, same result.
	b.subscribe(t, "bf", "crowd", "start_position => 'earliest'", "backfill_batch => 3")
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				var n int
				if err := b.Pool.QueryRow(b.ctx, "SELECT fanout._bitmap_step()").Scan(&n); err != nil || n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.runJobs(t)
	var changed int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT j.changed FROM fanout.bitmap_job j JOIN fanout.consumer_group g USING (group_id)
		  WHERE g.group_name = 'crowd' AND j.kind = 'backfill'`).Scan(&changed))
	require.Equal(t, int64(25), changed, "each message got the bit exactly once")
	require.Equal(t, msgs, b.readAck(t, "bf", "crowd"))
	require.Empty(t, b.checkConsistency(t))
}

func TestReferenceDeadGroupRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "rel")
	b.subscribe(t, "rel", "A")
	b.subscribe(t, "rel", "B", "heartbeat_timeout => '1 second'", "dead_after_misses => 1")
	msgs := b.publishN(t, "rel", 3)
	require.Equal(t, msgs, b.readAck(t, "rel", "A"))
	// B acks message 1 before it dies.
	ms := b.read(t, b.Pool, "rel", ptr("B"), "b", 1, "1 minute")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	for _, id := range msgs[1:] {
		_, _, st := b.bits(t, "rel", id)
		require.Equal(t, "pending", st)
	}
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(now() + interval '10 seconds')")
	require.NoError(t, err)
	require.Equal(t, "dead", b.groupStatus(t, "rel", "B"))
	b.runJobs(t)
	req, done, st := b.bits(t, "rel", msgs[0])
	require.Equal(t, []string{"A", "B"}, req, "message 1 was completed by B: untouched")
	require.Equal(t, []string{"A", "B"}, done)
	require.Equal(t, "completed", st)
	for _, id := range msgs[1:] {
		req, _, st := b.bits(t, "rel", id)
		require.Equal(t, []string{"A"}, req, "B's bit released")
		require.Equal(t, "completed", st)
	}
	var changed int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT j.changed FROM fanout.bitmap_job j JOIN fanout.consumer_group g USING (group_id) WHERE j.kind = 'release' AND g.group_name = 'B'").Scan(&changed))
	require.Equal(t, int64(2), changed)
	// Running the release again changes nothing.
	_, err = b.Pool.Exec(b.ctx,
		"SELECT fanout._start_bitmap_job(group_id, 'release', 0, 10) FROM fanout.consumer_group WHERE group_name = 'B'")
	require.NoError(t, err)
	b.runJobs(t)
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT j.changed FROM fanout.bitmap_job j JOIN fanout.consumer_group g USING (group_id) WHERE j.kind = 'release' AND g.group_name = 'B'").Scan(&changed))
	require.Equal(t, int64(0), changed, "release is idempotent")
	require.Empty(t, b.checkConsistency(t))

	// The only group dies: its messages become unclaimed and age out by
	// zero_subscription_retention.
	b.refTopic(t, "solo", "retention => '1 hour'", "zero_subscription_retention => '3 hours'")
	b.subscribe(t, "solo", "only", "heartbeat_timeout => '1 second'", "dead_after_misses => 1")
	solo := b.publishN(t, "solo", 4)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(now() + interval '10 seconds')")
	require.NoError(t, err)
	b.runJobs(t)
	_, _, st = b.bits(t, "solo", solo[0])
	require.Equal(t, "unclaimed", st)
	b.rotate(t)
	before := b.partitions(t, "solo")
	b.cleanupAll(t, "2 hours")
	require.Equal(t, before, b.partitions(t, "solo"), "unclaimed messages are kept for zero_subscription_retention")
	b.cleanupAll(t, "4 hours")
	require.Equal(t, before-1, b.partitions(t, "solo"))
}

func TestReferenceResurrection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "res")
	b.subscribe(t, "res", "A")
	b.subscribe(t, "res", "late", "heartbeat_timeout => '1 second'", "dead_after_misses => 1")
	first := b.publishN(t, "res", 3)
	require.Equal(t, first[:1], sorted(ids(func() []msg {
		ms := b.read(t, b.Pool, "res", ptr("late"), "l", 1, "1 minute")
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
		return ms
	}())))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(now() + interval '10 seconds')")
	require.NoError(t, err)
	b.runJobs(t)
	for _, id := range first[1:] {
		req, _, _ := b.bits(t, "res", id)
		require.Equal(t, []string{"A"}, req)
	}
	missed := b.publishN(t, "res", 2) // published while dead: not required of it
	req, _, _ := b.bits(t, "res", missed[0])
	require.Equal(t, []string{"A"}, req)

	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat('res', 'late')").Scan(&status))
	require.Equal(t, "active", status)
	b.runJobs(t)
	for _, id := range append(append([]int64{}, first[1:]...), missed...) {
		req, _, _ := b.bits(t, "res", id)
		require.Equal(t, []string{"A", "late"}, req, "bit back on message %d it had not acked", id)
	}
	req, _, _ = b.bits(t, "res", first[0])
	require.Equal(t, []string{"A", "late"}, req)
	got := b.readAck(t, "res", "late")
	require.Equal(t, append(append([]int64{}, first[1:]...), missed...), got, "it receives what it missed")
	require.Empty(t, b.checkConsistency(t))
}

func TestReferenceGroupLimitAndBitReuse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "wide", "zombie_ttl => '1 hour'")
	for i := 0; i < 64; i++ {
		b.subscribe(t, "wide", fmt.Sprintf("g%02d", i))
	}
	_, err := b.Pool.Exec(b.ctx, "SELECT * FROM fanout.subscribe('wide', 'g64')")
	requireSQLState(t, err, "PGQ17")
	require.Contains(t, err.Error(), "64")
	require.Contains(t, err.Error(), "offset")

	// A cancelled group's bit comes back only once its row is cleaned up and
	// no retained message mentions the bit.
	id := b.publish(t, b.Pool, "wide", `{}`)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.unsubscribe('wide', 'g00')")
	require.NoError(t, err)
	b.runJobs(t)
	_, err = b.Pool.Exec(b.ctx, "SELECT * FROM fanout.subscribe('wide', 'g64')")
	requireSQLState(t, err, "PGQ17")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout._cleanup_groups(now() + interval '2 hours')")
	require.NoError(t, err)
	// The release cleared bit 0 from the message and g00's row is gone: the
	// bit is free again.
	var bit int
	_, err = b.Pool.Exec(b.ctx, "SELECT * FROM fanout.subscribe('wide', 'g64')")
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT bit_no FROM fanout.consumer_group WHERE group_name = 'g64'").Scan(&bit))
	require.Equal(t, 0, bit)
	req, _, _ := b.bits(t, "wide", id)
	require.NotContains(t, req, "g64", "a reused bit does not inherit old messages")
}

func TestReferenceBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "ref")
	exec := func(sql string) error {
		_, err := b.Pool.Exec(b.ctx, sql)
		return err
	}
	requireSQLState(t, exec("SELECT fanout.create_topic('qref', completion => 'reference')"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ref', 'x', backfill_batch => 0)"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ref', 'x', backfill_scope => 'everything')"), "PGQ03")
	requireSQLState(t, exec("SELECT fanout.cancel_backfill('ref', 'nope')"), "PGQ14")
	requireSQLState(t, exec("SELECT fanout.force_complete_orphaned('ref', NULL)"), "PGQ03")
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.consumer_group").Scan(&n))
	require.Zero(t, n, "no partial state")
}

// A message published by a transaction that stamped it before a late
// joiner's subscription committed, and that commits only after the backfill
// walked past it, still gets the late joiner's bit: the backfill waits for
// such writers and then fixes their rows.
func TestReferenceBackfillWaitsForWritersRunningAtItsStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "fence")
	b.subscribe(t, "fence", "A")
	old := b.publishN(t, "fence", 5)

	writer := b.Conn(t)
	tx, err := writer.Begin(b.ctx)
	require.NoError(t, err)
	var straggler int64
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT fanout.publish('fence', '{\"late\":true}')").Scan(&straggler))

	b.subscribe(t, "fence", "late", "start_position => 'earliest'")
	b.runJobs(t)
	st, _, _ := b.backfill(t, "late")
	require.Equal(t, "in_progress", st, "the backfill waits for the writer that was running at its start")
	require.Empty(t, b.read(t, b.Pool, "fence", ptr("late"), "l", 100, "1 minute"))

	require.NoError(t, tx.Commit(b.ctx))
	b.runJobs(t)
	st, _, _ = b.backfill(t, "late")
	require.Equal(t, "completed", st)
	req, _, _ := b.bits(t, "fence", straggler)
	require.Equal(t, []string{"A", "late"}, req)
	require.Equal(t, append(append([]int64{}, old...), straggler), b.readAck(t, "fence", "late"))
	require.Empty(t, b.checkConsistency(t))
}

// Invariant 6 (docs/design.md §3.6): COMPLETED messages are never modified (a late joiner's
// backfill and a seek back leave them alone), and a partition holding a
// message some required group has not acked is never reclaimed before
// max_retention, however old.
func TestReferenceCompletedImmutableAndPendingKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.refTopic(t, "imm", "retention => '1 hour'", "zero_subscription_retention => '1 hour'", "max_retention => '10 hours'")
	b.subscribe(t, "imm", "A")
	b.subscribe(t, "imm", "B")
	done := b.publishN(t, "imm", 3)
	pending := b.publishN(t, "imm", 2)
	require.Equal(t, append(append([]int64{}, done...), pending...), b.readAck(t, "imm", "A"))
	ms := b.read(t, b.Pool, "imm", ptr("B"), "b", 3, "1 minute")
	require.Equal(t, done, ids(ms))
	b.ack(t, b.Pool, ms[0].LeaseID, nil)

	type bitsRow struct{ req, done []string }
	snapshot := func(id int64) bitsRow {
		r, d, _ := b.bits(t, "imm", id)
		return bitsRow{r, d}
	}
	before := map[int64]bitsRow{}
	for _, id := range done {
		_, _, st := b.bits(t, "imm", id)
		require.Equal(t, "completed", st)
		before[id] = snapshot(id)
	}
	b.subscribe(t, "imm", "late", "start_position => 'earliest'", "backfill_scope => 'all_retained'")
	b.runJobs(t)
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.seek('imm', 'B', 'earliest')")
	require.NoError(t, err)
	b.runJobs(t)
	for _, id := range done {
		require.Equal(t, before[id], snapshot(id), "COMPLETED message %d was modified", id)
	}
	require.Equal(t, pending, b.readAck(t, "imm", "late"), "the late joiner gets only what is not COMPLETED")

	// B has not acked the pending messages: their partition stays.
	b.rotate(t)
	parts := b.partitions(t, "imm")
	b.cleanup(t, "5 hours")
	require.Equal(t, parts, b.partitions(t, "imm"), "a pending message pins its partition")
	for _, id := range pending {
		_, _, st := b.bits(t, "imm", id)
		require.Equal(t, "pending", st)
	}
	// B sought back: it gets everything that requires it again, the
	// COMPLETED ones included, and acking those again changes nothing.
	require.Equal(t, append(append([]int64{}, done...), pending...), b.readAck(t, "imm", "B"))
	for _, id := range done {
		require.Equal(t, before[id], snapshot(id), "re-acking COMPLETED message %d modified it", id)
	}
	b.cleanup(t, "5 hours")
	require.Equal(t, parts-1, b.partitions(t, "imm"), "once everyone acked, it goes")
}

// Invariant 7 (docs/design.md §3.7) holds in reference mode too: the consume
// path (read, ack, nack, retries, lease expiry, dead letters) never updates
// or deletes a message row. Completion goes into the topic's completion table
// (fanout._complete_bits), so a group's ack does not rewrite the row (payload
// included) for every group that shares it. Groups ack concurrently from two
// connections, one nacks into dead letters, one lets a lease expire and
// acks the re-delivery; cleanup then reclaims the partition by completion
// (after the statistics are checked: a dropped partition takes them along).
func TestReferenceConsumePathIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "ref.append.only"
	b.refTopic(t, topic, "max_attempts => 2", "retention => '0'", "zero_subscription_retention => '0'")
	for _, g := range []string{"A", "B", "C"} {
		b.subscribe(t, topic, g)
	}
	producer, c1, c2 := b.Conn(t), b.Conn(t), b.Conn(t)
	const total = 300
	var all []int64
	for i := 0; i < total/100; i++ {
		all = append(all, b.qPublishN(t, producer, topic, i*100, 100)...)
	}

	// A and B ack the same messages at the same time, page by page.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, g := range []string{"A", "B"} {
		conn := []*pgx.Conn{c1, c2}[i]
		wg.Add(1)
		go func(g string, conn *pgx.Conn) {
			defer wg.Done()
			for n := 0; n < total; {
				ms, err := readMsgs(b.ctx, conn, topic, &g, "w", 50, "1 minute")
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					errs <- fmt.Errorf("group %s got %d of %d", g, n, total)
					return
				}
				if _, err := conn.Exec(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID); err != nil {
					errs <- err
					return
				}
				n += len(ms)
			}
		}(g, conn)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// C: the first page's lease expires and is taken over (attempt 2); of
	// every page, half is acked and half nacked twice (dead letters).
	ms := b.read(t, c1, topic, ptr("C"), "c", 100, "1 second")
	require.Len(t, ms, 100)
	b.qWaitExpired(t, ms[0].LeaseID)
	for page := 0; ; page++ {
		require.Less(t, page, 100, "300 messages, 2 attempts each: never 100 pages")
		ms = b.read(t, c1, topic, ptr("C"), "c", 50, "1 minute")
		if len(ms) == 0 {
			break
		}
		half := ids(ms)[:len(ms)/2]
		require.Equal(t, len(half), b.ack(t, c1, ms[0].LeaseID, half))
		b.qNack(t, c1, ms[0].LeaseID, nil, ptr("0"), "fail")
	}
	for _, id := range []int64{all[0], all[total/2], all[total-1]} {
		_, _, st := b.bits(t, topic, id)
		require.Equal(t, "completed", st, "message %d", id)
	}
	for _, c := range []*pgx.Conn{producer, c1, c2} {
		_, err := c.Exec(b.ctx, "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
		_, err = c.Exec(b.ctx, "SELECT 1")
		require.NoError(t, err)
	}
	for {
		var ins, upd, del int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_del), 0)
			FROM pg_stat_user_tables
			WHERE schemaname = 'fanout_data' AND relname NOT LIKE '%\_done\_p%'`).Scan(&ins, &upd, &del))
		require.Zero(t, upd, "UPDATE on a message table")
		require.Zero(t, del, "DELETE on a message table")
		if ins >= total {
			break
		}
		select {
		case <-b.ctx.Done():
			t.Fatalf("statistics never showed the %d inserts (saw %d)", total, ins)
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Completion lets cleanup reclaim the partition.
	b.rotate(t)
	parts := b.partitions(t, topic)
	b.cleanup(t, "1 hour")
	require.Less(t, b.partitions(t, topic), parts, "every message COMPLETED: its partition goes")
}
