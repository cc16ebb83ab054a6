package tests

// Edge cases: delayed delivery and priority (rev4). Scripted
// interleavings on named sessions; every check is a boolean on what the
// contract (README "Inbox", docs/architecture.md "Delayed delivery" and
// "Priority") promises.

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// rv4PubAt publishes one message due in `in` (server clock) and returns its
// id and deliver_at.
func (b *bundle) rv4PubAt(t *testing.T, q querier, topic, in string, extra string) (int64, time.Time) {
	t.Helper()
	var id int64
	var at time.Time
	require.NoError(t, q.QueryRow(b.ctx, fmt.Sprintf(`SELECT s.at, fanout.publish($1, '{"d":1}', deliver_at => s.at%s)
		FROM (SELECT clock_timestamp() + $2::interval AS at) s`, extra), topic, in).Scan(&at, &id))
	return id, at
}

// rv4WaitPast waits until the server clock is past ts.
func (b *bundle) rv4WaitPast(t *testing.T, ts time.Time) {
	t.Helper()
	for {
		var past bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT clock_timestamp() > $1", ts).Scan(&past))
		if past {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *bundle) rv4Read(t *testing.T, q querier, topic string, group *string, max int, lease string) []msg {
	t.Helper()
	return b.read(t, q, topic, group, "c", max, lease)
}

func rv4Has(ms []msg, id int64) bool {
	for _, m := range ms {
		if m.MessageID == id {
			return true
		}
	}
	return false
}

// S1: a delayed message published in a transaction that commits after its
// deliver_at has passed; meanwhile a reader on another session is not held up.
func TestDelayPriorityEdgeDelayCommitAfterDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.commit")
	pub, rd := b.Conn(t), b.Conn(t)
	tx, err := pub.Begin(b.ctx)
	require.NoError(t, err)
	did, at := b.rv4PubAt(t, tx, "rv.commit", "500 milliseconds", "")
	u := b.publish(t, rd, "rv.commit", `{"u":1}`)
	ms := b.rv4Read(t, rd, "rv.commit", nil, 10, "30 seconds")
	require.True(t, len(ms) == 1 && ms[0].MessageID == u, "reader: undelayed message, not held up by the open delayed publisher")
	b.ack(t, rd, ms[0].LeaseID, nil)
	b.rv4WaitPast(t, at)
	require.NoError(t, tx.Commit(b.ctx))
	ms = b.rv4Read(t, rd, "rv.commit", nil, 10, "30 seconds")
	require.True(t, len(ms) == 1 && ms[0].MessageID == did && ms[0].Attempt == 1, "committed after due: delivered at once, attempt 1: %v", ids(ms))
	b.ack(t, rd, ms[0].LeaseID, nil)
	require.Empty(t, b.rv4Read(t, rd, "rv.commit", nil, 10, "30 seconds"), "no second delivery")
}

// S2: argument edges of deliver_at/delay on publish and publish_batch.
func TestDelayPriorityEdgeDelayArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.args")
	var past, null, neg int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.args', '{}', deliver_at => now() - interval '1 hour')`).Scan(&past))
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.args', '{}', deliver_at => NULL, delay => NULL)`).Scan(&null))
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.args', '{}', deliver_at => '-infinity')`).Scan(&neg))
	ms := b.rv4Read(t, b.Pool, "rv.args", nil, 10, "30 seconds")
	require.ElementsMatch(t, []int64{past, null, neg}, ids(ms), "past / NULL / -infinity deliver_at: at once")
	require.Equal(t, int64(0), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = 'rv.args'`))
	for _, c := range []string{
		`SELECT fanout.publish('rv.args', '{}', deliver_at => now(), delay => '1 second')`,
		`SELECT fanout.publish('rv.args', '{}', delay => '366 days 1 second')`,
		`SELECT fanout.publish('rv.args', '{}', deliver_at => 'infinity')`,
		`SELECT fanout.publish('rv.args', '{}', deliver_at => clock_timestamp() + interval '367 days')`,
		`SELECT fanout.publish_batch('rv.args', ARRAY['{}']::jsonb[], delay => '367 days')`,
		`SELECT fanout.publish_batch('rv.args', ARRAY['{}']::jsonb[], deliver_at => now(), delay => '1 second')`,
		`SELECT fanout.publish('rv.args', '{}', priority => 10)`,
		`SELECT fanout.publish('rv.args', '{}', priority => -1)`,
	} {
		_, err := b.Pool.Exec(b.ctx, c)
		requireSQLState(t, err, "PGQ03")
	}
	// "a delay over 366 days" is refused: a delay in months must be measured
	// in real time, not by interval comparison (12 months 6 days = 366 "days"
	// for the comparison, 371 days in fact).
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish('rv.args', '{"far":1}', delay => '12 months 6 days')`)
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('rv.args', ARRAY['{}']::jsonb[], delay => '1 year 2 days')`)
	requireSQLState(t, err, "PGQ03")
	require.Equal(t, int64(0), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = 'rv.args'`), "nothing written")
}

// S3: a delayed message, once due, then nacked, then its lease expiring,
// until max_attempts: dead-lettered, never delivered again.
func TestDelayPriorityEdgeDelayNackExpireDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.nack", "max_attempts => 3")
	c1, c2 := b.Conn(t), b.Conn(t)
	did, at := b.rv4PubAt(t, c1, "rv.nack", "3 seconds", "")
	require.Empty(t, b.rv4Read(t, c2, "rv.nack", nil, 10, "30 seconds"), "not due yet")
	b.rv4WaitPast(t, at)
	ms := b.rv4Read(t, c2, "rv.nack", nil, 10, "30 seconds")
	require.True(t, len(ms) == 1 && ms[0].MessageID == did && ms[0].Attempt == 1)
	require.Equal(t, 1, b.qNack(t, c2, ms[0].LeaseID, nil, ptr("0 seconds"), "boom"))
	ms = b.rv4Read(t, c1, "rv.nack", nil, 10, "1 second")
	require.True(t, len(ms) == 1 && ms[0].MessageID == did && ms[0].Attempt == 2, "nacked: again, attempt 2")
	b.qWaitExpired(t, ms[0].LeaseID)
	ms = b.rv4Read(t, c2, "rv.nack", nil, 10, "1 second")
	require.True(t, len(ms) == 1 && ms[0].MessageID == did && ms[0].Attempt == 3, "expired: again, attempt 3")
	b.qWaitExpired(t, ms[0].LeaseID)
	require.Empty(t, b.rv4Read(t, c1, "rv.nack", nil, 10, "30 seconds"), "max_attempts reached: not delivered")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.dead_letter WHERE message_id = $1`, did))
	require.Empty(t, b.rv4Read(t, c2, "rv.nack", nil, 10, "30 seconds"))
}

// S4: groups subscribed after the publish but before deliver_at: latest
// does not get it (README: those subscribed when its transaction committed);
// earliest / message_id / timestamp do, like an undelayed message.
func TestDelayPriorityEdgeDelaySubscribeBetween(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.sub", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.sub', 'before')`)
	require.NoError(t, err)
	var t0 time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&t0))
	did, at := b.rv4PubAt(t, b.Pool, "rv.sub", "4 seconds", "")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.sub', 'latest', start_position => 'latest')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.sub', 'earliest', start_position => 'earliest')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.sub', 'byid', start_position => 'message_id', start_message_id => $1)`, did)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.sub', 'bytime', start_position => 'timestamp', start_at => $1)`, t0)
	require.NoError(t, err)
	u := b.publish(t, b.Pool, "rv.sub", `{"u":1}`)
	groups := []string{"before", "latest", "earliest", "byid", "bytime"}
	got := map[string][]int64{}
	for _, g := range groups {
		ms := b.rv4Read(t, b.Pool, "rv.sub", ptr(g), 10, "5 minutes")
		require.False(t, rv4Has(ms, did), "group %s: delayed message before deliver_at", g)
		got[g] = append(got[g], ids(ms)...)
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	b.rv4WaitPast(t, at)
	for _, g := range groups {
		for i := 0; i < 3; i++ {
			ms := b.rv4Read(t, b.Pool, "rv.sub", ptr(g), 10, "5 minutes")
			got[g] = append(got[g], ids(ms)...)
			if len(ms) > 0 {
				b.ack(t, b.Pool, ms[0].LeaseID, nil)
			}
		}
	}
	for _, g := range groups {
		want := []int64{u, did}
		if g == "latest" {
			want = []int64{u}
		}
		require.ElementsMatch(t, want, got[g], "group %s", g)
	}
}

// S5: seek past a delayed message not yet due, and back.
func TestDelayPriorityEdgeDelaySeek(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.seek", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.seek', 'g')`)
	require.NoError(t, err)
	did, at := b.rv4PubAt(t, b.Pool, "rv.seek", "4 seconds", "")
	u := b.publish(t, b.Pool, "rv.seek", `{"u":1}`)
	ms := b.rv4Read(t, b.Pool, "rv.seek", ptr("g"), 10, "5 minutes")
	require.Equal(t, []int64{u}, ids(ms))
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	// Seek to u (past the delayed one): what the group gets from there.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.seek('rv.seek', 'g', 'message_id', start_message_id => $1)`, u)
	require.NoError(t, err)
	ms = b.rv4Read(t, b.Pool, "rv.seek", ptr("g"), 10, "5 minutes")
	require.Equal(t, []int64{u}, ids(ms), "seek to u: u again")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	pastSeekRetry := b.count(t, `SELECT count(*) FROM fanout.retry WHERE message_id = $1`, did)
	require.Zero(t, pastSeekRetry, "seek clears pending retries, the parked delayed message with them")
	// And back to earliest: the delayed message comes once when due, u once more.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.seek('rv.seek', 'g', 'earliest')`)
	require.NoError(t, err)
	ms = b.rv4Read(t, b.Pool, "rv.seek", ptr("g"), 10, "5 minutes")
	require.Equal(t, []int64{u}, ids(ms), "seek earliest before due: only u")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	b.rv4WaitPast(t, at)
	var after []int64
	for i := 0; i < 3; i++ {
		ms = b.rv4Read(t, b.Pool, "rv.seek", ptr("g"), 10, "5 minutes")
		after = append(after, ids(ms)...)
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	require.Equal(t, []int64{did}, after, "after seek back: the delayed message exactly once when due")
}

// S6: a pubsub group paused while its parked delayed message becomes due;
// another group reads on. Each gets it exactly once.
func TestDelayPriorityEdgeDelayPausedGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.pause", "semantics => 'pubsub'")
	for _, g := range []string{"a", "p", "q"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.pause', $1)`, g)
		require.NoError(t, err)
	}
	did, at := b.rv4PubAt(t, b.Pool, "rv.pause", "3 seconds", "")
	require.Empty(t, b.rv4Read(t, b.Pool, "rv.pause", ptr("p"), 10, "5 minutes")) // parks it for p
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.pause('rv.pause', 'p')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.pause('rv.pause', 'q')`) // q never read
	require.NoError(t, err)
	b.rv4WaitPast(t, at)
	ms := b.rv4Read(t, b.Pool, "rv.pause", ptr("a"), 10, "5 minutes")
	require.Equal(t, []int64{did}, ids(ms))
	require.Empty(t, b.rv4Read(t, b.Pool, "rv.pause", ptr("p"), 10, "5 minutes"), "paused: nothing")
	for _, g := range []string{"p", "q"} {
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.resume('rv.pause', $1)`, g)
		require.NoError(t, err)
		var got []int64
		for i := 0; i < 3; i++ {
			ms = b.rv4Read(t, b.Pool, "rv.pause", ptr(g), 10, "5 minutes")
			got = append(got, ids(ms)...)
			if len(ms) > 0 {
				b.ack(t, b.Pool, ms[0].LeaseID, nil)
			}
		}
		require.Equal(t, []int64{did}, got, "group %s after resume: once", g)
	}
}

// S7: replay of a delayed message before it is due must not hand it out early.
func TestDelayPriorityEdgeDelayReplayBeforeDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.replay", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.replay', 'g')`)
	require.NoError(t, err)
	did, at := b.rv4PubAt(t, b.Pool, "rv.replay", "4 seconds", "")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.replay('rv.replay', 'g', $1)`, []int64{did})
	require.Error(t, err, "replay before the cursor passed it: refused")
	u := b.publish(t, b.Pool, "rv.replay", `{}`)
	ms := b.rv4Read(t, b.Pool, "rv.replay", ptr("g"), 10, "5 minutes")
	require.Equal(t, []int64{u}, ids(ms))
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	var n int
	err = b.Pool.QueryRow(b.ctx, `SELECT fanout.replay('rv.replay', 'g', $1)`, []int64{did}).Scan(&n)
	require.NoError(t, err)
	require.Zero(t, n, "parked (waiting in the retry table): left as it is")
	ms = b.rv4Read(t, b.Pool, "rv.replay", ptr("g"), 10, "5 minutes")
	require.False(t, rv4Has(ms, did), "replay must not hand out a delayed message before deliver_at")
	b.rv4WaitPast(t, at)
	var got []int64
	for i := 0; i < 3; i++ {
		ms = b.rv4Read(t, b.Pool, "rv.replay", ptr("g"), 10, "5 minutes")
		got = append(got, ids(ms)...)
		if len(ms) > 0 {
			b.ack(t, b.Pool, ms[0].LeaseID, nil)
		}
	}
	require.Equal(t, []int64{did}, got)
}

// S8: starvation bound. A window of priority 0 half read; priority 9
// committed meanwhile (on another session, also while the read runs) goes to
// the next window: the rest of the priority-0 window comes first.
func TestDelayPriorityEdgePriorityWindowBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, pre := range []bool{false, true} {
		topic := fmt.Sprintf("rv.win.%v", pre)
		b.createTopic(t, b.Pool, topic)
		pub, rd := b.Conn(t), b.Conn(t)
		if pre { // topic already prioritized
			x := b.pubPrio(t, pub, topic, 1)
			ms := b.rv4Read(t, rd, topic, nil, 10, "5 minutes")
			require.Equal(t, []int64{x}, ids(ms))
			b.ack(t, rd, ms[0].LeaseID, nil)
		}
		low := b.qPublishN(t, pub, topic, 0, 10)
		ms := b.rv4Read(t, rd, topic, nil, 5, "5 minutes")
		require.Equal(t, low[:5], ids(ms), "%s: first half of the p0 window", topic)
		b.ack(t, rd, ms[0].LeaseID, nil)
		// A priority-9 publisher opens its transaction before the next read and commits after it.
		// (The first priority publish of a topic updates the topic row: a
		// second priority publisher would wait for the open one, so the
		// committed one goes first.)
		hi := b.pubPrio(t, b.Pool, topic, 9)
		tx, err := pub.Begin(b.ctx)
		require.NoError(t, err)
		hiOpen := b.pubPrio(t, tx, topic, 9)
		ms = b.rv4Read(t, rd, topic, nil, 3, "5 minutes")
		require.NoError(t, tx.Commit(b.ctx))
		require.Equal(t, low[5:8], ids(ms), "%s: p9 committed after the window opened must not overtake", topic)
		b.ack(t, rd, ms[0].LeaseID, nil)
		ms = b.rv4Read(t, rd, topic, nil, 2, "5 minutes")
		require.Equal(t, low[8:10], ids(ms), "%s: rest of the window", topic)
		b.ack(t, rd, ms[0].LeaseID, nil)
		ms = b.rv4Read(t, rd, topic, nil, 10, "5 minutes")
		require.ElementsMatch(t, []int64{hi, hiOpen}, ids(ms), "%s: then the p9s", topic)
		b.ack(t, rd, ms[0].LeaseID, nil)
	}
}

// S9: priority ordering inside a window, with nack (retries first) and max_bytes.
func TestDelayPriorityEdgePriorityNackBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.pn")
	c := b.Conn(t)
	p0 := b.pubPrio(t, c, "rv.pn", 0)
	var big int64
	require.NoError(t, c.QueryRow(b.ctx, `SELECT fanout.publish('rv.pn', jsonb_build_object('x', repeat('x', 5000)), priority => 9)`).Scan(&big))
	p5 := b.pubPrio(t, c, "rv.pn", 5)
	p5b := b.pubPrio(t, c, "rv.pn", 5)
	// max_bytes 100: the first message of the page always comes (the big p9), alone.
	rows, err := c.Query(b.ctx, `SELECT message_id FROM fanout.read('rv.pn', consumer => 'c', max_messages => 10, max_bytes => 100)`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{big}, got, "highest priority first, alone under max_bytes")
	var lease int64
	require.NoError(t, c.QueryRow(b.ctx, `SELECT fanout._lease_code(lease_id, true) FROM fanout.lease WHERE $1 = ANY(msg_ids) AND open_count > 0`, big).Scan(&lease))
	require.Equal(t, 1, b.qNack(t, c, lease, nil, ptr("0 seconds"), "x"))
	ms := b.rv4Read(t, c, "rv.pn", nil, 2, "5 minutes")
	require.Equal(t, []int64{big, p5}, ids(ms), "retry first, then p5")
	require.Equal(t, int32(2), ms[0].Attempt)
	b.ack(t, c, ms[0].LeaseID, nil)
	ms = b.rv4Read(t, c, "rv.pn", nil, 10, "5 minutes")
	require.Equal(t, []int64{p5b, p0}, ids(ms))
	// partitioned topic: priorities taken (each key partition is read by
	// level: tests/specs/kpart_priority_order.spec), out of range refused
	b.createTopic(t, b.Pool, "rv.part", "partitions => 4")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish('rv.part', '{}', message_group => 'k', priority => 10)`)
	requireSQLState(t, err, "PGQ03")
	for _, ok := range []string{
		`SELECT fanout.publish('rv.part', '{}', message_group => 'k', priority => 1)`,
		`SELECT fanout.publish_batch('rv.part', ARRAY['{}']::jsonb[], priority => 9)`,
		`SELECT fanout.publish('rv.part', '{}', message_group => 'k', priority => 0)`,
	} {
		_, err = b.Pool.Exec(b.ctx, ok)
		require.NoError(t, err, ok)
	}
}

// S10: a delayed high-priority message and undelayed low ones; on a
// pubsub topic with two groups; delayed published in a batch.
func TestDelayPriorityEdgePriorityDelayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.pd", "semantics => 'pubsub'")
	for _, g := range []string{"a", "b"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.pd', $1)`, g)
		require.NoError(t, err)
	}
	var at time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT clock_timestamp() + interval '1 second'`).Scan(&at))
	rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish_batch('rv.pd', ARRAY['{"a":1}','{"a":2}']::jsonb[], deliver_at => $1, priority => 9)`, at)
	require.NoError(t, err)
	delayed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	lows := b.qPublishN(t, b.Pool, "rv.pd", 0, 3)
	for _, g := range []string{"a", "b"} {
		ms := b.rv4Read(t, b.Pool, "rv.pd", ptr(g), 10, "5 minutes")
		require.Equal(t, lows, ids(ms), "group %s: the delayed p9s are not in the way", g)
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
	}
	b.rv4WaitPast(t, at)
	more := b.qPublishN(t, b.Pool, "rv.pd", 10, 2)
	for _, g := range []string{"a", "b"} {
		ms := b.rv4Read(t, b.Pool, "rv.pd", ptr(g), 10, "5 minutes")
		require.Equal(t, append(append([]int64{}, delayed...), more...), ids(ms), "group %s: due delayed first, then the stream", g)
	}
}

// S11: cleanup with a delayed message whose deliver_at is beyond retention:
// its partition stays (queue; pubsub group that never read; a group that
// parked it); max_retention drops it and counts it as lost.
func TestDelayPriorityEdgeDelayPinsPartition(t *testing.T) {
	t.Parallel()
	for _, sem := range []string{"queue", "pubsub"} {
		b := setup(t)
		topic := "rv.pin." + sem
		b.createTopic(t, b.Pool, topic, "semantics => '"+sem+"'", qPartOpts)
		var g *string
		if sem == "pubsub" {
			g = ptr("reader")
			for _, n := range []string{"reader", "idle"} {
				_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe($1, $2)`, topic, n)
				require.NoError(t, err)
			}
		}
		var did int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish($1, '{}', delay => '100 days')`, topic).Scan(&did))
		u := b.publish(t, b.Pool, topic, `{}`)
		ms := b.rv4Read(t, b.Pool, topic, g, 10, "5 minutes")
		require.Equal(t, []int64{u}, ids(ms))
		b.ack(t, b.Pool, ms[0].LeaseID, nil)
		b.qRotate(t)
		b.publish(t, b.Pool, topic, `{}`) // into the new partition
		require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "%s: delayed message pins its partition past retention", topic)
		require.Equal(t, int64(1), b.count(t, `SELECT scheduled FROM fanout.topics WHERE topic = $1`, topic))
		require.Equal(t, 1, b.qCleanup(t, "3 hours"), "%s: max_retention drops it", topic)
		lost := b.count(t, `SELECT coalesce(sum(lost_messages),0) FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id) WHERE t.topic = $1`, topic)
		want := int64(1)
		if sem == "pubsub" {
			want = 3 // reader: the parked delayed one; idle: the delayed one and u (never read)
			require.Equal(t, int64(1), b.count(t, `SELECT lost_messages FROM fanout.consumer_group WHERE group_name = 'reader'`))
			require.Equal(t, int64(2), b.count(t, `SELECT lost_messages FROM fanout.consumer_group WHERE group_name = 'idle'`))
		}
		require.Equal(t, want, lost, "%s: lost counted per group that owed it", topic)
		require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM fanout.retry WHERE message_id = $1`, did), "%s: retry row released", topic)
	}
}

// S12: reference completion mode: a delayed message to two groups, one
// subscribed (earliest) in between; cleanup keeps it until both acked.
func TestDelayPriorityEdgeDelayReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.ref", "semantics => 'pubsub'", "completion => 'reference'", qPartOpts)
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.ref', 'a')`)
	require.NoError(t, err)
	did, at := b.rv4PubAt(t, b.Pool, "rv.ref", "3 seconds", "")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('rv.ref', 'late', start_position => 'latest')`)
	require.NoError(t, err)
	for _, g := range []string{"a", "late"} {
		require.Empty(t, b.rv4Read(t, b.Pool, "rv.ref", ptr(g), 10, "5 minutes"))
	}
	b.rv4WaitPast(t, at)
	ms := b.rv4Read(t, b.Pool, "rv.ref", ptr("a"), 10, "5 minutes")
	require.Equal(t, []int64{did}, ids(ms))
	require.Empty(t, b.rv4Read(t, b.Pool, "rv.ref", ptr("late"), 10, "5 minutes"), "latest subscriber after commit: not owed")
	b.qRotate(t)
	require.Equal(t, 0, b.qCleanup(t, "90 minutes"), "leased, not completed: kept")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	require.Equal(t, 1, b.qCleanup(t, "90 minutes"), "completed: dropped")
}

// S13: 10,000 delayed messages, then undelayed ones: the undelayed must not
// wait. Count the empty reads a consumer meets first.
func TestDelayPriorityEdgeDelayedRunThenUndelayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.run")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('rv.run', array_fill('{"d":1}'::jsonb, ARRAY[10000]), delay => '1 hour')`)
	require.NoError(t, err)
	u := b.publish(t, b.Pool, "rv.run", `{"u":1}`)
	emptyBy := map[int]int{}
	for _, max := range []int{100, 10} {
		if max == 10 {
			_, err = b.Pool.Exec(b.ctx, `SELECT fanout.seek('rv.run', NULL, 'earliest')`)
			require.NoError(t, err)
		}
		empty := 0
		for {
			ms := b.rv4Read(t, b.Pool, "rv.run", nil, max, "5 minutes")
			if len(ms) > 0 {
				require.Equal(t, []int64{u}, ids(ms))
				b.ack(t, b.Pool, ms[0].LeaseID, nil)
				break
			}
			empty++
		}
		emptyBy[max] = empty
	}
	// A read passes 10,000 delayed messages, at least 10 pages and at most
	// 100 (README, "Inbox"): pages of 100 pass all 10,000 in the first read,
	// pages of 10 pass 1,000 a read.
	require.Equal(t, map[int]int{100: 1, 10: 10}, emptyBy,
		"empty reads before the undelayed message behind 10,000 delayed ones")
}

// S14: a group subscribed (latest) while the delayed message's publishing
// transaction is still open: subscribed when it committed, so it is owed
// the message; offset and reference mode.
func TestDelayPriorityEdgeDelaySubscribeWhilePublishing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"offset", "reference"} {
		b := setup(t)
		topic := "rv.mid." + mode
		b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "completion => '"+mode+"'")
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe($1, 'early')`, topic)
		require.NoError(t, err)
		pub, adm := b.Conn(t), b.Conn(t)
		tx, err := pub.Begin(b.ctx)
		require.NoError(t, err)
		did, at := b.rv4PubAt(t, tx, topic, "1 second", "")
		_, err = adm.Exec(b.ctx, `SELECT fanout.subscribe($1, 'mid', start_position => 'latest')`, topic)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(b.ctx))
		b.rv4WaitPast(t, at)
		for _, g := range []string{"early", "mid"} {
			var got []int64
			for i := 0; i < 50 && len(got) == 0; i++ {
				ms := b.rv4Read(t, b.Pool, topic, ptr(g), 10, "5 minutes")
				got = append(got, ids(ms)...)
				if len(ms) > 0 {
					b.ack(t, b.Pool, ms[0].LeaseID, nil)
				} else {
					time.Sleep(50 * time.Millisecond) // reference: restamp / backfill may need a moment
				}
			}
			require.Equal(t, []int64{did}, got, "%s group %s: subscribed before the commit, owed the delayed message", mode, g)
		}
	}
}

// S15: two consumers racing on a prioritized queue with delayed messages
// becoming due and nacks: everything delivered, nothing twice under an
// unexpired lease (each message acked exactly once).
func TestDelayPriorityEdgePriorityDelayRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.race")
	var want []int64
	for i := 0; i < 300; i++ {
		var id int64
		var err error
		switch {
		case i%6 == 0:
			err = b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.race', '{}', delay => '800 milliseconds', priority => $1)`, i%10).Scan(&id)
		default:
			err = b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.race', '{}', priority => $1)`, i%10).Scan(&id)
		}
		require.NoError(t, err)
		want = append(want, id)
	}
	type res struct {
		acked []int64
		err   error
	}
	out := make(chan res, 2)
	var done atomic.Int64
	for w := 0; w < 2; w++ {
		conn := b.Conn(t)
		go func(w int) {
			var r res
			deadline := time.Now().Add(30 * time.Second)
			nacked := map[int64]bool{}
			for time.Now().Before(deadline) {
				ms, err := readMsgs(b.ctx, conn, "rv.race", nil, fmt.Sprintf("w%d", w), 7, "5 minutes")
				if err != nil {
					r.err = err
					break
				}
				if len(ms) == 0 {
					if done.Load() >= 300 {
						break
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var ack []int64
				for _, m := range ms {
					if m.MessageID%5 == 0 && !nacked[m.MessageID] {
						nacked[m.MessageID] = true
						if _, err := conn.Exec(b.ctx, `SELECT fanout.nack($1, $2, '0 seconds', 'x')`, m.LeaseID, []int64{m.MessageID}); err != nil {
							r.err = err
						}
						continue
					}
					ack = append(ack, m.MessageID)
				}
				var n int
				if len(ack) > 0 {
					if err := conn.QueryRow(b.ctx, `SELECT fanout.ack($1, $2)`, ms[0].LeaseID, ack).Scan(&n); err != nil {
						r.err = err
						break
					}
					if n != len(ack) {
						r.err = fmt.Errorf("ack of %v settled %d", ack, n)
						break
					}
					r.acked = append(r.acked, ack...)
					done.Add(int64(len(ack)))
				}
			}
			out <- r
		}(w)
	}
	var all []int64
	for i := 0; i < 2; i++ {
		r := <-out
		require.NoError(t, r.err)
		all = append(all, r.acked...)
	}
	qRequireUnique(t, all, "acked messages")
	require.ElementsMatch(t, want, all, "every message acked exactly once")
}
