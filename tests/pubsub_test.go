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

// Pub/sub in offset mode (docs/design.md §1.1): every group gets every message, members
// of a group compete, groups have independent positions and lifecycles.

func (b *bundle) subscribe(t *testing.T, topic, group string, args ...string) (status string, start *int64) {
	t.Helper()
	sql := "SELECT status, effective_start_message_id FROM fanout.subscribe($1, $2"
	for _, a := range args {
		sql += ", " + a
	}
	sql += ")"
	require.NoError(t, b.Pool.QueryRow(b.ctx, sql, topic, group).Scan(&status, &start))
	return status, start
}

func (b *bundle) publishN(t *testing.T, topic string, n int) []int64 {
	t.Helper()
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	rows, err := b.Pool.Query(b.ctx, "SELECT fanout.publish_batch($1, $2::jsonb[])", topic, payloads)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, out, n)
	return out
}

// drain reads and acks a group until a read returns nothing.
func (b *bundle) drain(t *testing.T, topic string, group *string) []int64 {
	t.Helper()
	var got []int64
	for {
		ms := b.read(t, b.Pool, topic, group, "drainer", 500, "1 minute")
		if len(ms) == 0 {
			return got
		}
		got = append(got, ids(ms)...)
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
	}
}

func (b *bundle) scalar(t *testing.T, sql string, args ...any) any {
	t.Helper()
	var v any
	require.NoError(t, b.Pool.QueryRow(b.ctx, sql, args...).Scan(&v))
	return v
}

func (b *bundle) groupStatus(t *testing.T, topic, group string) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT status FROM fanout.groups WHERE topic = $1 AND group_name = $2", topic, group).Scan(&s))
	return s
}

// rotate closes every topic's open partition that holds messages. A rotation
// is three _manage_partitions calls at least: the first creates the next
// partition, the second (a later transaction) refreshes every session's
// partition list, the third jumps into it. Each call does a slice of the work
// within its time budget (250 ms), and under load one topic's step can spend
// it, leaving the next topic for the next call: so it is called again until
// every partition that was open with rows at the start is closed. A call that
// returns 0 before that fails the test (its contract: call again while it
// returns > 0, nothing left when it returns 0).
func (b *bundle) rotate(t *testing.T) {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx,
		`SELECT p.topic_id, p.part_no, p.relname FROM fanout.partition p
		  WHERE p.closed_at IS NULL
		    AND p.part_no = (SELECT min(o.part_no) FROM fanout.partition o
		                      WHERE o.topic_id = p.topic_id AND o.closed_at IS NULL)`)
	require.NoError(t, err)
	type open struct {
		topic, part int64
		rel         string
	}
	opens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		return o, r.Scan(&o.topic, &o.part, &o.rel)
	})
	require.NoError(t, err)
	var topics, parts []int64
	for _, o := range opens {
		var rows bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT EXISTS (SELECT 1 FROM fanout_data."+pgx.Identifier{o.rel}.Sanitize()+")").Scan(&rows))
		if rows {
			topics, parts = append(topics, o.topic), append(parts, o.part)
		}
	}
	for i := 1; ; i++ {
		var n, still int
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT fanout._manage_partitions(p_now => now() + interval '2 hours')").Scan(&n))
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			`SELECT count(*) FROM fanout.partition p JOIN unnest($1::bigint[], $2::bigint[]) AS d(topic_id, part_no)
			  USING (topic_id, part_no) WHERE p.closed_at IS NULL`, topics, parts).Scan(&still))
		if i >= 3 && still == 0 {
			return
		}
		require.Positive(t, n, "rotation call %d did nothing while %d partition(s) due to close are open", i, still)
		require.Less(t, i, 1000, "rotation did not finish")
	}
}

// cleanupAll calls fanout._cleanup_partitions until it returns 0 (its
// contract: a call does a bounded slice of the work, within a time budget
// that load can spend on one topic), and returns the sum of what the calls
// returned.
func (b *bundle) cleanupAll(t *testing.T, at string) int {
	t.Helper()
	total := 0
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "cleanup did not finish")
		n := b.cleanup(t, at)
		if n == 0 {
			return total
		}
		total += n
	}
}

func (b *bundle) partitions(t *testing.T, topic string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT partitions FROM fanout.topics WHERE topic = $1", topic).Scan(&n))
	return n
}

func (b *bundle) cleanup(t *testing.T, at string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT fanout._cleanup_partitions(p_now => now() + $1::interval)", at).Scan(&n))
	return n
}

func sorted(xs []int64) []int64 {
	out := append([]int64(nil), xs...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func TestPubsubFanOutGroupsAndMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic, n = "fan.out", 10000
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	groups := []string{"email", "analytics", "audit"}
	for _, g := range groups {
		b.subscribe(t, topic, g)
	}
	published := b.publishN(t, topic, n)

	type key struct {
		group string
		id    int64
	}
	var mu sync.Mutex
	seen := map[key]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for _, g := range groups {
		for m := 0; m < 2; m++ {
			wg.Add(1)
			go func(group, member string) {
				defer wg.Done()
				for empty := 0; empty < 3; {
					ms, err := readMsgs(b.ctx, b.Pool, topic, &group, member, 100, "1 minute")
					if err != nil {
						errs <- err
						return
					}
					if len(ms) == 0 {
						empty++
						continue
					}
					empty = 0
					mu.Lock()
					for _, x := range ms {
						seen[key{group, x.MessageID}]++
					}
					mu.Unlock()
					if _, err := b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID); err != nil {
						errs <- err
						return
					}
				}
			}(g, fmt.Sprintf("%s-%d", g, m))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, len(groups)*n, "every group gets every message")
	for _, g := range groups {
		for _, id := range published {
			require.Equal(t, 1, seen[key{g, id}], "group %s message delivered exactly once", g)
		}
	}
	require.Equal(t, int64(0), b.scalar(t, "SELECT sum(lag_messages)::bigint FROM fanout.groups"))
	require.Equal(t, int64(len(groups)*n), b.scalar(t, "SELECT sum(delivered)::bigint FROM fanout.groups"))
}

func TestQueueVersusPubsubDeliveryCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "q")
	b.createTopic(t, b.Pool, "ps", "semantics => 'PUB_SUB'")
	groups := []string{"g1", "g2", "g3"}
	for _, g := range groups {
		b.subscribe(t, "ps", g)
	}
	b.publishN(t, "q", 300)
	b.publishN(t, "ps", 300)

	count := func(topic string) int {
		total := 0
		for round := 0; ; round++ {
			got := 0
			for _, g := range groups {
				ms := b.read(t, b.Pool, topic, ptr(g), "c-"+g, 7, "1 minute")
				got += len(ms)
				if len(ms) > 0 {
					b.ack(t, b.Pool, ms[0].LeaseID, nil)
				}
			}
			total += got
			if got == 0 {
				return total
			}
		}
	}
	require.Equal(t, 300, count("q"), "queue: group names are attribution only, readers compete")
	require.Equal(t, 900, count("ps"), "pubsub: every group gets every message")
}

func TestPubsubStartPositions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "starts"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	old := b.publishN(t, topic, 10)
	b.subscribe(t, topic, "latest")
	var between time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&between))
	fresh := b.publishN(t, topic, 5)

	require.Equal(t, fresh, sorted(b.drain(t, topic, ptr("latest"))), "latest gets exactly what came after")

	b.subscribe(t, topic, "earliest", "start_position => 'EARLIEST'")
	require.Equal(t, append(append([]int64{}, old...), fresh...), sorted(b.drain(t, topic, ptr("earliest"))))

	_, start := b.subscribe(t, topic, "ts", "start_position => 'timestamp'", fmt.Sprintf("start_at => '%s'", between.Format(time.RFC3339Nano)))
	require.NotNil(t, start)
	require.Equal(t, fresh[0], *start)
	require.Equal(t, fresh, sorted(b.drain(t, topic, ptr("ts"))), "timestamp between bursts gets the later burst")

	_, start = b.subscribe(t, topic, "byid", "start_position => 'message_id'", fmt.Sprintf("start_message_id => %d", old[7]))
	require.Equal(t, old[7], *start)
	want := append(append([]int64{}, old[7:]...), fresh...)
	require.Equal(t, want, sorted(b.drain(t, topic, ptr("byid"))))

	_, start = b.subscribe(t, topic, "capped", "start_position => 'earliest'", "max_backfill => 10")
	all := append(append([]int64{}, old...), fresh...)
	require.Equal(t, all[5], *start, "max_backfill keeps the newest 10")
	require.Equal(t, all[5:], sorted(b.drain(t, topic, ptr("capped"))))

	// Re-subscribing never rewinds an existing group; seek does.
	status, _ := b.subscribe(t, topic, "latest", "start_position => 'earliest'")
	require.Equal(t, "active", status)
	require.Empty(t, b.drain(t, topic, ptr("latest")), "re-subscribe with earliest must not rewind")
	var first *int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.seek($1, 'latest', 'earliest')", topic).Scan(&first))
	require.Equal(t, all[0], *first)
	require.Equal(t, all, sorted(b.drain(t, topic, ptr("latest"))), "seek rewinds")

	more := b.publishN(t, topic, 3)
	for _, g := range []string{"latest", "earliest", "ts", "byid", "capped"} {
		require.Equal(t, more, sorted(b.drain(t, topic, ptr(g))), "group %s continues with new messages", g)
	}
}

func TestPubsubOutOfOrderCommitAndLongTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "ooo"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	groups := []string{"a", "b", "c"}
	for _, g := range groups {
		b.subscribe(t, topic, g)
	}
	// A long transaction on an unrelated table holds an xid for the whole test.
	long := b.Conn(t)
	_, err := long.Exec(b.ctx, "CREATE TABLE unrelated (x int)")
	require.NoError(t, err)
	longTx, err := long.Begin(b.ctx)
	require.NoError(t, err)
	_, err = longTx.Exec(b.ctx, "INSERT INTO unrelated VALUES (1)")
	require.NoError(t, err)
	defer longTx.Rollback(b.ctx) //nolint:errcheck

	// A publishes first (lower id) and commits last.
	connA := b.Conn(t)
	txA, err := connA.Begin(b.ctx)
	require.NoError(t, err)
	var idA int64
	require.NoError(t, txA.QueryRow(b.ctx, "SELECT fanout.publish($1, '{\"who\":\"A\"}')", topic).Scan(&idA))
	idB := b.publish(t, b.Pool, topic, `{"who":"B"}`)
	require.Less(t, idA, idB)

	for _, g := range groups {
		require.Equal(t, []int64{idB}, b.drain(t, topic, ptr(g)), "B is delivered while A and the long transaction are open")
	}
	require.NoError(t, txA.Commit(b.ctx))
	for _, g := range groups {
		require.Equal(t, []int64{idA}, b.drain(t, topic, ptr(g)), "A's message is not skipped")
	}
	// Still under the long transaction: new messages flow.
	burst := b.publishN(t, topic, 1000)
	for _, g := range groups {
		require.Equal(t, burst, sorted(b.drain(t, topic, ptr(g))))
	}
}

func TestPubsubDeadGroupDetectionAndResurrection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "dead"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "retention => '1 hour'")
	b.subscribe(t, topic, "alive")
	b.subscribe(t, topic, "flaky", "heartbeat_timeout => '2 seconds'", "dead_after_misses => 3")

	var last time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT last_heartbeat FROM fanout.groups WHERE group_name = 'flaky'").Scan(&last))
	detect := func(after time.Duration) {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(p_now => $1)", last.Add(after))
		require.NoError(t, err)
	}
	detect(2100 * time.Millisecond)
	require.Equal(t, "active", b.groupStatus(t, topic, "flaky"), "one miss")
	detect(4200 * time.Millisecond)
	require.Equal(t, "active", b.groupStatus(t, topic, "flaky"), "two misses")
	require.Equal(t, int64(1), b.scalar(t,
		"SELECT count(*) FROM fanout.groups_near_timeout($1) WHERE group_name = 'flaky'", last.Add(4200*time.Millisecond)))

	// A sign of life resets the count: miss, recover, miss never kills.
	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat($1, 'flaky', 'f1')", topic).Scan(&status))
	require.Equal(t, "active", status)
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT last_heartbeat FROM fanout.groups WHERE group_name = 'flaky'").Scan(&last))
	detect(4200 * time.Millisecond)
	require.Equal(t, "active", b.groupStatus(t, topic, "flaky"), "misses were reset by the heartbeat")
	detect(6300 * time.Millisecond)
	require.Equal(t, "dead", b.groupStatus(t, topic, "flaky"), "third consecutive miss kills")

	// The dead group no longer pins: a partition everyone else passed is dropped.
	before := b.publishN(t, topic, 50)
	b.rotate(t)
	require.Equal(t, before, sorted(b.drain(t, topic, ptr("alive"))))
	require.Equal(t, 1, b.cleanup(t, "2 hours"), "the dead group does not hold the partition")
	require.Equal(t, int64(50), b.scalar(t, "SELECT lost_messages FROM fanout.groups WHERE group_name = 'flaky'"),
		"what the dead group never read is counted as lost")
	require.Equal(t, int64(1), b.scalar(t,
		"SELECT count(*) FROM fanout.event_log WHERE kind = 'unread_dropped' AND group_name = 'flaky' AND count = 50"))

	// Messages still retained reach it after resurrection, from its own position.
	after := b.publishN(t, topic, 5)
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat($1, 'flaky')", topic).Scan(&status))
	require.Equal(t, "active", status, "a heartbeat resurrects")
	require.Equal(t, after, sorted(b.drain(t, topic, ptr("flaky"))))
	require.Equal(t, after, sorted(b.drain(t, topic, ptr("alive"))))
	require.Empty(t, b.checkConsistency(t))
}

func (b *bundle) checkConsistency(t *testing.T) []string {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, "SELECT problem FROM fanout.check_consistency()")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestPubsubZeroSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "blocking", "semantics => 'pubsub'", "block_writes_without_subscriptions => true")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.publish('blocking', '{}')")
	requireSQLState(t, err, "PGQ07")
	require.Contains(t, err.Error(), "zero active subscriptions")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish_batch('blocking', ARRAY['{}'::jsonb])")
	requireSQLState(t, err, "PGQ07")
	b.subscribe(t, "blocking", "g")
	b.publish(t, b.Pool, "blocking", `{}`)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.pause('blocking', 'g')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish('blocking', '{}')")
	requireSQLState(t, err, "PGQ07")

	// Without blocking, messages published with no group are kept for
	// zero_subscription_retention and reach a later 'earliest' subscriber.
	b.createTopic(t, b.Pool, "open", "semantics => 'pubsub'", "retention => '1 hour'",
		"zero_subscription_retention => '3 hours'")
	kept := b.publishN(t, "open", 20)
	b.rotate(t)
	require.Equal(t, 0, b.cleanup(t, "2 hours"), "kept while younger than zero_subscription_retention")
	b.subscribe(t, "open", "late", "start_position => 'earliest'")
	require.Equal(t, kept, sorted(b.drain(t, "open", ptr("late"))))

	b.createTopic(t, b.Pool, "open2", "semantics => 'pubsub'", "zero_subscription_retention => '3 hours'")
	b.publishN(t, "open2", 20)
	b.rotate(t)
	require.Positive(t, b.cleanup(t, "4 hours"), "dropped after zero_subscription_retention")
	require.Equal(t, int64(0), b.scalar(t, "SELECT messages FROM fanout.topics WHERE topic = 'open2'"))
}

func TestPubsubWatermark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "wm"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "retention => '1 hour'",
		"zero_subscription_retention => '1 hour'", "max_retention => '10 hours'")
	b.subscribe(t, topic, "fast")
	b.subscribe(t, topic, "slow")
	first := b.publishN(t, topic, 100)
	b.rotate(t)
	second := b.publishN(t, topic, 100)

	require.Equal(t, append(append([]int64{}, first...), second...), sorted(b.drain(t, topic, ptr("fast"))))
	half := b.read(t, b.Pool, topic, ptr("slow"), "s", 60, "1 minute")
	b.ack(t, b.Pool, half[0].LeaseID, nil)
	require.Equal(t, 0, b.cleanup(t, "2 hours"), "the slow group still needs the first partition")
	require.Equal(t, 2, b.partitions(t, topic))

	// An open lease pins too, even when the stream moved past.
	rest := b.read(t, b.Pool, topic, ptr("slow"), "s", 1000, "1 minute")
	require.Equal(t, 0, b.cleanup(t, "2 hours"), "an un-acked lease pins its partition")
	b.ack(t, b.Pool, rest[0].LeaseID, nil)
	require.Equal(t, 1, b.cleanup(t, "2 hours"), "dropped once every active group passed it")
	require.Equal(t, 1, b.partitions(t, topic))

	// max_retention drops unread data and counts it per group.
	third := b.publishN(t, topic, 100)
	b.rotate(t)
	require.Equal(t, 0, b.cleanup(t, "2 hours"), "nobody read the third batch")
	require.Equal(t, 1, b.cleanup(t, "11 hours"), "max_retention is a hard cap")
	require.Equal(t, int64(len(third)), b.scalar(t, "SELECT lost_messages FROM fanout.groups WHERE group_name = 'fast'"))
	require.Equal(t, int64(len(third)), b.scalar(t, "SELECT lost_messages FROM fanout.groups WHERE group_name = 'slow'"))
	require.Equal(t, int64(2*len(third)), b.scalar(t, "SELECT dropped_unread FROM fanout.topics WHERE topic = $1", topic))
	require.Empty(t, b.drain(t, topic, ptr("fast")))
	require.Empty(t, b.checkConsistency(t))
}

func TestPubsubPausedGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "paused"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "retention => '1 hour'", "zombie_ttl => '5 hours'",
		"zero_subscription_retention => '1 hour'")
	b.subscribe(t, topic, "p")
	b.subscribe(t, topic, "other")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.pause($1, 'p')", topic)
	require.NoError(t, err)
	msgs := b.publishN(t, topic, 10)
	require.Empty(t, b.read(t, b.Pool, topic, ptr("p"), "p1", 10, "1 minute"), "paused groups receive nothing")
	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat($1, 'p')", topic).Scan(&status))
	require.Equal(t, "paused", status)

	b.rotate(t)
	require.Equal(t, msgs, sorted(b.drain(t, topic, ptr("other"))))
	require.Equal(t, 0, b.cleanup(t, "2 hours"), "a paused group pins within zombie_ttl")
	require.Equal(t, 1, b.cleanup(t, "6 hours"), "past zombie_ttl it no longer pins")

	require.Equal(t, int64(len(msgs)), b.scalar(t, "SELECT lost_messages FROM fanout.groups WHERE group_name = 'p'"))
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.resume($1, 'p')", topic)
	require.NoError(t, err)
	fresh := b.publishN(t, topic, 3)
	require.Equal(t, fresh, sorted(b.drain(t, topic, ptr("p"))), "resumes from its position")
}

func TestPubsubUnsubscribeReleasesEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "unsub"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	b.subscribe(t, topic, "g")
	b.publishN(t, topic, 10)
	ms := b.read(t, b.Pool, topic, ptr("g"), "c", 5, "1 minute")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.nack($1, $2)", ms[0].LeaseID, []int64{ms[0].MessageID})
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.unsubscribe($1, 'g')", topic)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID)
	requireSQLState(t, err, "PGQ11")
	require.Equal(t, int64(0), b.scalar(t, "SELECT in_flight + retry_pending FROM fanout.groups WHERE group_name = 'g'"))
	var status string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.heartbeat($1, 'g')", topic).Scan(&status))
	require.Equal(t, "cancelled", status, "members learn they were cancelled")
	require.Empty(t, b.checkConsistency(t))
}

func TestPubsubMessageStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "status"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	b.subscribe(t, topic, "a")
	b.subscribe(t, topic, "b")
	id := b.publish(t, b.Pool, topic, `{}`)
	ms := b.read(t, b.Pool, topic, ptr("a"), "a1", 10, "1 minute")
	statuses := func() map[string]string {
		rows, err := b.Pool.Query(b.ctx, "SELECT group_name, status FROM fanout.message_status($1, $2)", topic, id)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var g, s string
			require.NoError(t, rows.Scan(&g, &s))
			out[g] = s
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, map[string]string{"a": "in_flight", "b": "pending"}, statuses())
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	require.Equal(t, map[string]string{"a": "acked", "b": "pending"}, statuses())
	_, err := b.Pool.Exec(b.ctx, "SELECT * FROM fanout.message_status($1, $2)", topic, id+1000)
	requireSQLState(t, err, "PGQ18")
	var named string
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT status FROM fanout.message_status(topic => $1, message_id => $2) WHERE group_name = 'a'",
		topic, id).Scan(&named))
	require.Equal(t, "acked", named, "named arguments work")
}

func TestPubsubBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "ps", "semantics => 'pubsub'")
	b.createTopic(t, b.Pool, "q")
	b.subscribe(t, "ps", "g")
	exec := func(sql string, args ...any) error {
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		return err
	}
	requireSQLState(t, exec("SELECT * FROM fanout.read('ps', 'nope')"), "PGQ14")
	requireSQLState(t, exec("SELECT * FROM fanout.read('ps')"), "PGQ13")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('q', 'g')"), "PGQ19")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', start_position => 'yesterday')"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', start_position => 'timestamp')"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', start_position => 'message_id')"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', NULL)"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', '')"), "PGQ04")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', heartbeat_timeout => '0')"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', dead_after_misses => 0)"), "PGQ03")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'x', max_backfill => -1)"), "PGQ03")
	require.Equal(t, int64(1), b.scalar(t, "SELECT count(*) FROM fanout.groups WHERE topic = 'ps'"), "no partial state")
	requireSQLState(t, exec("SELECT fanout.seek('ps', 'g', 'message_id', start_message_id => 999999)"), "PGQ03")
	requireSQLState(t, exec("SELECT fanout.seek('ps', 'nope', 'earliest')"), "PGQ14")
	requireSQLState(t, exec("SELECT fanout.resume('ps', 'g')"), "PGQ15")
	requireSQLState(t, exec("SELECT fanout.resurrect_group('ps', 'g')"), "PGQ15")
	requireSQLState(t, exec("SELECT fanout.pause('q', 'g')"), "PGQ19")
	require.NoError(t, exec("SELECT fanout.unsubscribe('ps', 'g')"))
	requireSQLState(t, exec("SELECT fanout.unsubscribe('ps', 'g')"), "PGQ15")
	requireSQLState(t, exec("SELECT * FROM fanout.subscribe('ps', 'g')"), "PGQ16")
	requireSQLState(t, exec("SELECT * FROM fanout.read('ps', 'g')"), "PGQ16")
	requireSQLState(t, exec("SELECT fanout.seek('ps', 'g', 'earliest')"), "PGQ16")
	// Quotes, semicolons and long names are data.
	weird := "g'; DROP TABLE fanout.topic; --\"x\""
	status, _ := b.subscribe(t, "ps", weird)
	require.Equal(t, "active", status)
	require.Equal(t, int64(1), b.scalar(t, "SELECT count(*) FROM fanout.groups WHERE group_name = $1", weird))
}

// Acks are signs of life: a member that keeps acking a long page, without
// reading or heartbeating, does not get its group declared dead.
func TestPubsubAcksKeepGroupAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "acks"
	b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
	b.subscribe(t, topic, "slow", "heartbeat_timeout => '2 seconds'", "dead_after_misses => 1")
	ids := b.publishN(t, topic, 3)
	ms := b.read(t, b.Pool, topic, ptr("slow"), "worker", 10, "1 hour")
	require.Len(t, ms, 3)
	// Long after the read, the member acks one message.
	time.Sleep(2100 * time.Millisecond)
	b.ack(t, b.Pool, ms[0].LeaseID, ids[:1])
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups()")
	require.NoError(t, err)
	require.Equal(t, "active", b.groupStatus(t, topic, "slow"), "the ack counted as a sign of life")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(now() + interval '3 seconds')")
	require.NoError(t, err)
	require.Equal(t, "dead", b.groupStatus(t, topic, "slow"), "and without any sign of life it dies")
}
