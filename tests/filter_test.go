package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Subscription filters (docs/filters.md): a group with a filter receives
// only messages whose headers contain it; the others are passed over as if
// acked, counted in fanout.groups.filtered_total, and pin no storage.

// fPub publishes one message with the given headers (and message_group key
// when not empty) and returns its id.
func (b *bundle) fPub(t *testing.T, q querier, topic, headers, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, '{}'::jsonb, $2::jsonb, nullif($3, ''))`,
		topic, headers, key).Scan(&id))
	return id
}

// fDrain reads and acks (every lease of every page) until a read returns
// nothing; max messages a read.
func (b *bundle) fDrain(t *testing.T, topic string, group *string, max int) []int64 {
	t.Helper()
	var got []int64
	for {
		ms := b.read(t, b.Pool, topic, group, "drainer", max, "1 minute")
		if len(ms) == 0 {
			return got
		}
		leases := map[int64][]int64{}
		for _, m := range ms {
			leases[m.LeaseID] = append(leases[m.LeaseID], m.MessageID)
		}
		for l, xs := range leases {
			b.ack(t, b.Pool, l, xs)
		}
		got = append(got, ids(ms)...)
	}
}

// fFiltered returns a group's filtered_total (group "" on a queue topic).
func (b *bundle) fFiltered(t *testing.T, topic, group string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT filtered_total FROM fanout.groups WHERE topic = $1 AND group_name IS NOT DISTINCT FROM nullif($2, '')`,
		topic, group).Scan(&n))
	return n
}

// Match and no-match delivery on every kind of topic: a filtered group gets
// exactly the matching messages (pages smaller than the run of non-matching
// ones, so scans go on past them), an unfiltered group gets everything, the
// counter counts the rest, and the partition that held them can be dropped
// once both groups are through: what a filter passed over pins nothing.
func TestFilterDelivery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		opts  []string
		queue bool
		keyed bool
	}{
		{name: "offset", opts: []string{"semantics => 'pubsub'"}},
		{name: "reference", opts: []string{"semantics => 'pubsub'", "completion => 'reference'"}},
		{name: "keyed", opts: []string{"semantics => 'pubsub'", "partitions => 4"}, keyed: true},
		{name: "keyedref", opts: []string{"semantics => 'pubsub'", "completion => 'reference'", "partitions => 3"}, keyed: true},
		{name: "queue", opts: []string{"semantics => 'queue'"}, queue: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			topic := "f." + c.name
			b.createTopic(t, b.Pool, topic, append(c.opts, "retention => '1 hour'")...)
			var fg *string
			if c.queue {
				var f string
				require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.set_filter($1, NULL, '{"type": "a"}')::text`,
					topic).Scan(&f))
				require.Equal(t, `{"type": "a"}`, f)
			} else {
				fg = ptr("f")
				b.subscribe(t, topic, "f", `filter => '{"type": "a"}'`)
				b.subscribe(t, topic, "all")
			}
			var match, all []int64
			for i := 0; i < 120; i++ {
				h := `{"type": "b", "n": 1}`
				switch {
				case i%10 == 3:
					h = `{"type": "a", "n": 1}`
				case i%10 == 7:
					h = `{}`
				}
				key := ""
				if c.keyed {
					key = fmt.Sprintf("k%d", i%7)
				}
				id := b.fPub(t, b.Pool, topic, h, key)
				if i%10 == 3 {
					match = append(match, id)
				}
				all = append(all, id)
			}
			b.rotate(t)
			require.Equal(t, match, sorted(b.fDrain(t, topic, fg, 5)), "the filtered group: the matches only")
			if fg != nil {
				require.Equal(t, all, sorted(b.fDrain(t, topic, ptr("all"), 50)), "the unfiltered group: everything")
				require.Equal(t, int64(0), b.fFiltered(t, topic, "all"))
			}
			require.Equal(t, int64(len(all)-len(match)), b.fFiltered(t, topic, deref(fg)))
			require.Equal(t, 1, b.cleanup(t, "2 hours"), "the partition is dropped: filtered messages pin nothing")
			require.Empty(t, b.checkConsistency(t))
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Bad filters are PGQ03; NULL or {} is no filter; an existing group's
// subscribe keeps its filter with NULL or the same one, refuses another.
func TestFilterValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fv", "semantics => 'pubsub'")
	for _, bad := range []string{`'[1]'`, `'"a"'`, `'1'`, `'null'`,
		fmt.Sprintf(`jsonb_build_object('k', repeat('x', %d))`, 4100)} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('fv', 'g', filter => `+bad+`::jsonb)`)
		requireSQLState(t, err, "PGQ03")
	}
	b.subscribe(t, "fv", "g", `filter => '{"type": "a"}'`)
	b.subscribe(t, "fv", "g")                             // NULL: left as it is
	b.subscribe(t, "fv", "g", `filter => '{"type":"a"}'`) // the same filter
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('fv', 'g', filter => '{"type": "b"}')`)
	requireSQLState(t, err, "PGQ03")
	var f *string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT filter::text FROM fanout.groups WHERE group_name = 'g'`).Scan(&f))
	require.Equal(t, `{"type": "a"}`, *f)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fv', 'g', '[]')`)
	requireSQLState(t, err, "PGQ03")
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.set_filter('fv', 'g', '{}')::text`).Scan(&f))
	require.Nil(t, f, "the empty object is no filter")
	b.subscribe(t, "fv", "h", `filter => '{}'`)
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT filter::text FROM fanout.groups WHERE group_name = 'h'`).Scan(&f))
	require.Nil(t, f)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fv', 'nope', '{"a": 1}')`)
	requireSQLState(t, err, "PGQ14")

	b.createTopic(t, b.Pool, "fs", "semantics => 'pubsub'", "sequence_ordering => true")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('fs', 'g', filter => '{"a": 1}')`)
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('fs', sequence_ordering => false)")
	require.NoError(t, err)
	b.subscribe(t, "fs", "g", `filter => '{"a": 1}'`)
}

// A filter change applies to what the group's position has not passed: a
// message published before the change but not read yet is judged by the new
// filter; a page handed out under the old one stays leased and ackable.
func TestFilterChangeAppliesToUnread(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fc", "semantics => 'pubsub'")
	b.subscribe(t, "fc", "g", `filter => '{"type": "a"}'`)
	a1 := b.fPub(t, b.Pool, "fc", `{"type": "a"}`, "")
	b1 := b.fPub(t, b.Pool, "fc", `{"type": "b"}`, "")
	first := b.read(t, b.Pool, "fc", ptr("g"), "c", 1, "1 hour")
	require.Equal(t, []int64{a1}, ids(first))

	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fc', 'g', '{"type": "b"}')`)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'filter_changed'`))
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fc', 'g', '{"type": "b"}')`) // no change: no row
	require.NoError(t, err)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout.event_log WHERE kind = 'filter_changed'`))
	a2 := b.fPub(t, b.Pool, "fc", `{"type": "a"}`, "")
	b2 := b.fPub(t, b.Pool, "fc", `{"type": "b"}`, "")
	require.Equal(t, []int64{b1, b2}, b.fDrain(t, "fc", ptr("g"), 10), "b1 was not read before the change")
	require.Equal(t, 1, b.ack(t, b.Pool, first[0].LeaseID, ids(first)), "the old page is still ackable")
	require.Equal(t, int64(1), b.fFiltered(t, "fc", "g"), "a2")

	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fc', 'g', NULL)`)
	require.NoError(t, err)
	a3 := b.fPub(t, b.Pool, "fc", `{"type": "a"}`, "")
	require.Equal(t, []int64{a3}, b.fDrain(t, "fc", ptr("g"), 10), "no filter: everything")
	_ = a2
}

// A producer transaction open across the filter change (two connections):
// its messages are judged when the group reads them, by the filter in
// effect then, so nothing that matches the new filter is lost, and the
// counter counts exactly the rest.
func TestFilterPublisherInFlightAcrossChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fp", "semantics => 'pubsub'")
	b.subscribe(t, "fp", "g", `filter => '{"type": "a"}'`)
	before := b.fPub(t, b.Pool, "fp", `{"type": "a", "all": true}`, "")

	pub := b.Conn(t)
	tx, err := pub.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	var inflight, rest []int64
	for i := 0; i < 40; i++ {
		h := `{"type": "b", "all": true}`
		if i%4 == 0 {
			h = `{"type": "a", "all": true}`
		}
		if i%5 == 4 {
			h = `{"type": "c"}`
		}
		id := b.fPub(t, tx, "fp", h, "")
		if i%5 == 4 {
			rest = append(rest, id)
		} else {
			inflight = append(inflight, id)
		}
	}
	// The group reads while the producer's transaction runs (its window
	// opens with that transaction running), then its filter changes.
	require.Equal(t, []int64{before}, b.fDrain(t, "fp", ptr("g"), 3))
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fp', 'g', '{"all": true}')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, inflight, b.fDrain(t, "fp", ptr("g"), 3), "every message matching the new filter")
	require.Equal(t, int64(len(rest)), b.fFiltered(t, "fp", "g"))
}

// A read holding the group's row when the filter changes (two connections):
// set_filter waits for it, and the page that read made stays as made.
func TestFilterChangeWaitsForRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fw", "semantics => 'pubsub'")
	b.subscribe(t, "fw", "g", `filter => '{"type": "a"}'`)
	a1 := b.fPub(t, b.Pool, "fw", `{"type": "a"}`, "")
	b1 := b.fPub(t, b.Pool, "fw", `{"type": "b"}`, "")

	reader := b.Conn(t)
	tx, err := reader.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	page := b.read(t, tx, "fw", ptr("g"), "c", 10, "1 hour")
	require.Equal(t, []int64{a1}, ids(page))
	done := make(chan error, 1)
	go func() {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('fw', 'g', '{"type": "b"}')`)
		done <- err
	}()
	b.waitBlocked(t, "fanout.set_filter")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	b2 := b.fPub(t, b.Pool, "fw", `{"type": "b"}`, "")
	require.Equal(t, []int64{b2}, b.fDrain(t, "fw", ptr("g"), 10), "b1 was passed under the old filter")
	require.Equal(t, int64(1), b.fFiltered(t, "fw", "g"))
	_ = b1
}

// waitBlocked waits until a backend running a statement containing text
// waits for a lock.
func (b *bundle) waitBlocked(t *testing.T, text string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, text).Scan(&n))
		return n > 0
	}, time.Minute, 5*time.Millisecond)
}

// Dropping priorities (alter_topic(priorities => false)): the window a
// group is reading by priority is finished by priority (nothing handed out
// twice, nothing skipped), the next windows come in commit order whatever
// the messages' priorities; a page leased before the switch stays ackable;
// a second drop changes nothing; priorities => true brings priority order
// back from the next window; PGQ03 on a sequence-ordered topic.
func TestDropPriorities(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			opts := []string{"semantics => 'pubsub'"}
			if keyed {
				opts = append(opts, "partitions => 1")
			}
			b.createTopic(t, b.Pool, "dp", opts...)
			b.subscribe(t, "dp", "g")
			pub := func(prio int) int64 {
				var id int64
				require.NoError(t, b.Pool.QueryRow(b.ctx,
					`SELECT fanout.publish('dp', '{}', message_group => 'k', priority => $1)`, prio).Scan(&id))
				return id
			}
			p0, p9, p5 := pub(0), pub(9), pub(5)
			first := b.read(t, b.Pool, "dp", ptr("g"), "c", 1, "1 hour")
			require.Equal(t, []int64{p9}, ids(first), "by priority")
			if keyed { // a key partition serves one page at a time
				b.ack(t, b.Pool, first[0].LeaseID, ids(first))
			}

			_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('dp', priorities => false)")
			require.NoError(t, err)
			var dropped time.Time
			require.NoError(t, b.Pool.QueryRow(b.ctx,
				"SELECT priorities_dropped_at FROM fanout.topic WHERE topic = 'dp'").Scan(&dropped))
			q5, q0, q9 := pub(5), pub(0), pub(9)
			drain := func() []int64 { // one message a page, as consumer c (the key partition's owner)
				var got []int64
				for {
					ms := b.read(t, b.Pool, "dp", ptr("g"), "c", 1, "1 hour")
					if len(ms) == 0 {
						return got
					}
					got = append(got, ids(ms)...)
					b.ack(t, b.Pool, ms[0].LeaseID, ids(ms))
				}
			}
			require.Equal(t, []int64{p5, p0, q5, q0, q9}, drain(),
				"the open window finished by priority, the next in commit order")
			if !keyed {
				require.Equal(t, 1, b.ack(t, b.Pool, first[0].LeaseID, ids(first)), "the page leased before the switch")
			}

			_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('dp', priorities => false)")
			require.NoError(t, err)
			var again time.Time
			require.NoError(t, b.Pool.QueryRow(b.ctx,
				"SELECT priorities_dropped_at FROM fanout.topic WHERE topic = 'dp'").Scan(&again))
			require.Equal(t, dropped, again, "idempotent")
			require.Equal(t, int64(1), b.count(t, "SELECT count(*) FROM fanout.event_log WHERE kind = 'priorities_dropped'"))

			_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('dp', priorities => true)")
			require.NoError(t, err)
			r0, r9 := pub(0), pub(9)
			require.Equal(t, []int64{r9, r0}, drain(), "priority order again")
		})
	}
	b := setup(t)
	b.createTopic(t, b.Pool, "ds", "semantics => 'pubsub'", "sequence_ordering => true")
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('ds', priorities => true)")
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('ds', priorities => false)")
	require.NoError(t, err)
}

// whole_transactions with a filter: a page that ends inside a producer
// transaction is extended to the end of it, and the extension is filtered
// too (its matches come, the rest is passed over and counted).
func TestFilterWholeTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fwt", "semantics => 'pubsub'", "partitions => 1", "whole_transactions => true")
	b.subscribe(t, "fwt", "g", `filter => '{"type": "a"}'`)
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	var match []int64
	for i := 0; i < 10; i++ {
		h := `{"type": "b"}`
		if i%2 == 0 {
			h = `{"type": "a"}`
		}
		id := b.fPub(t, tx, "fwt", h, "k")
		if i%2 == 0 {
			match = append(match, id)
		}
	}
	require.NoError(t, tx.Commit(b.ctx))
	page := b.read(t, b.Pool, "fwt", ptr("g"), "c", 2, "1 hour")
	require.Equal(t, match, ids(page), "the whole transaction's matches in one page")
	b.ack(t, b.Pool, page[0].LeaseID, ids(page))
	require.Empty(t, b.read(t, b.Pool, "fwt", ptr("g"), "c", 2, "1 hour"))
	require.Equal(t, int64(5), b.fFiltered(t, "fwt", "g"))
}

// A filter is a group setting with subscribe's grant: a consumer role with
// consume on its tenant's topics sets filters there (subscribe(..., filter
// =>) and set_filter); on another tenant's topic, or without a grant, both
// are PGQ21 and change nothing; a producer-only role may not call them.
func TestFilterGrants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	b.createTopic(t, b.Pool, "a.f", "semantics => 'pubsub'")
	b.createTopic(t, b.Pool, "b.f", "semantics => 'pubsub'")
	b.subscribe(t, "b.f", "g")
	own, ownConn := b.tRole(t, "fown", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", own, "consume")
	_, noneConn := b.tRole(t, "fnone", "fanout_consumer")
	_, prodConn := b.tRole(t, "fprod", "fanout_producer")

	_, err := ownConn.Exec(b.ctx, `SELECT fanout.subscribe('a.f', 'g', filter => '{"k": 1}')`)
	require.NoError(t, err)
	_, err = ownConn.Exec(b.ctx, `SELECT fanout.set_filter('a.f', 'g', '{"k": 2}')`)
	require.NoError(t, err)
	for _, c := range []struct {
		conn  querier
		sql   string
		state string
	}{
		{ownConn, `SELECT fanout.set_filter('b.f', 'g', '{"k": 3}')`, "PGQ21"},
		{ownConn, `SELECT fanout.subscribe('b.f', 'h', filter => '{"k": 3}')`, "PGQ21"},
		{noneConn, `SELECT fanout.set_filter('a.f', 'g', '{"k": 3}')`, "PGQ21"},
		{prodConn, `SELECT fanout.set_filter('a.f', 'g', '{"k": 3}')`, "42501"},
	} {
		_, err := c.conn.Exec(b.ctx, c.sql)
		requireSQLState(t, err, c.state)
	}
	require.Equal(t, `{"k": 2}`, b.scalar(t, `SELECT filter::text FROM fanout.groups WHERE topic = 'a.f' AND group_name = 'g'`))
	require.Nil(t, b.scalar(t, `SELECT filter::text FROM fanout.groups WHERE topic = 'b.f' AND group_name = 'g'`))
}

// Retries and dead letters of a filtered group are those of any group: a
// matching message nacked comes again (attempt 2) and, at its last attempt,
// is dead-lettered; the passed-over message is neither retried nor
// dead-lettered, only counted.
func TestFilterRetriesAndDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "fr", "semantics => 'pubsub'", "max_attempts => 2")
	b.subscribe(t, "fr", "g", `filter => '{"type": "a"}'`)
	a1 := b.fPub(t, b.Pool, "fr", `{"type": "a"}`, "")
	b.fPub(t, b.Pool, "fr", `{"type": "b"}`, "")
	for attempt := int32(1); attempt <= 2; attempt++ {
		page := b.read(t, b.Pool, "fr", ptr("g"), "c", 10, "1 hour")
		require.Equal(t, []int64{a1}, ids(page))
		require.Equal(t, attempt, page[0].Attempt)
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.nack($1, retry_in => '0')`, page[0].LeaseID).Scan(&n))
		require.Equal(t, 1, n)
	}
	require.Empty(t, b.read(t, b.Pool, "fr", ptr("g"), "c", 10, "1 hour"))
	require.Equal(t, int64(1), b.scalar(t, `SELECT dead_letters FROM fanout.groups WHERE group_name = 'g'`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM fanout.dead_letters WHERE message_id = $1`, a1))
	require.Equal(t, int64(1), b.fFiltered(t, "fr", "g"))
}
