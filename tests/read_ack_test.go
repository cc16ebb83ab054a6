package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// readAcking calls read(..., ack => lease) and returns the page.
func (b *bundle) readAcking(t *testing.T, q querier, topic string, group *string, consumer string, max int,
	ack int64) ([]msg, error) {
	t.Helper()
	rows, err := q.Query(b.ctx, `SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
		FROM fanout.read($1, $2, $3, max_messages => $4, lease => '30 seconds', ack => $5)`,
		topic, group, consumer, max, ack)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []msg
	for rows.Next() {
		var m msg
		if err := rows.Scan(&m.LeaseID, &m.MessageID, &m.Payload, &m.Headers, &m.Group, &m.Published, &m.Attempt); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// read(..., ack => lease) acks the previous page and hands out the next in
// one call, on queue and pubsub topics in both completion modes and on
// partitioned topics: every message is delivered once, and the last page is
// acked by a plain ack.
func TestReadAcksThePreviousPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		topic, opts, group string
	}{
		{"ra.queue", "", ""},
		{"ra.offset", "semantics => 'pubsub'", "g"},
		{"ra.reference", "semantics => 'pubsub', completion => 'reference'", "g"},
		{"ra.parts", "semantics => 'pubsub', partitions => 2", "g"},
	} {
		if c.opts == "" {
			b.createTopic(t, b.Pool, c.topic)
		} else {
			b.createTopic(t, b.Pool, c.topic, c.opts)
		}
		var group *string
		if c.group != "" {
			group = ptr(c.group)
			b.subscribe(t, c.topic, c.group)
		}
		for i := 0; i < 25; i++ {
			b.publish(t, b.Pool, c.topic, `{"n":1}`)
		}
		var got []int64
		page := b.read(t, b.Pool, c.topic, group, "c1", 10, "30 seconds")
		for len(page) > 0 {
			got = append(got, ids(page)...)
			prev := page[0].LeaseID
			next, err := b.readAcking(t, b.Pool, c.topic, group, "c1", 10, prev)
			require.NoError(t, err, c.topic)
			var open int
			require.NoError(t, b.Pool.QueryRow(b.ctx,
				`SELECT coalesce((SELECT open_count FROM fanout.lease WHERE lease_id = $1::bigint), 0)`, prev).Scan(&open))
			require.Zero(t, open, "%s: the previous page is acked (or its slot holds the next page)", c.topic)
			if len(next) == 0 {
				break
			}
			page = next
		}
		require.Len(t, got, 25, c.topic)
		require.Len(t, uniq(got), 25, "%s: each message once", c.topic)
		if c.group != "" {
			var lag int64
			require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT coalesce(sum(in_flight), 0) FROM fanout.groups
				WHERE topic = $1 AND group_name = $2`, c.topic, c.group).Scan(&lag))
			require.Zero(t, lag, "%s: nothing in flight", c.topic)
		}
	}
}

// An ack that cannot be done fails the read with it, and nothing of either
// happens: a lease of another group (PGQ03), an unknown lease (PGQ10), a
// lease whose messages were taken over (PGQ11).
func TestReadAckFailsWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rf", "semantics => 'pubsub'")
	b.subscribe(t, "rf", "a")
	b.subscribe(t, "rf", "b")
	for i := 0; i < 4; i++ {
		b.publish(t, b.Pool, "rf", `{"n":1}`)
	}
	pageA := b.read(t, b.Pool, "rf", ptr("a"), "c", 2, "30 seconds")
	require.Len(t, pageA, 2)
	state := func() string {
		var s string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT string_agg(format('%s:%s:%s', g.group_name, g.cur_txid, g.cur_id), ',' ORDER BY g.group_name)
			|| '/' || (SELECT string_agg(format('%s:%s', l.lease_id, l.open_count), ',' ORDER BY l.slot_id) FROM fanout.lease l)
			FROM fanout.consumer_group g`).Scan(&s))
		return s
	}

	before := state()
	_, err := b.readAcking(t, b.Pool, "rf", ptr("b"), "c", 2, pageA[0].LeaseID)
	requireSQLState(t, err, "PGQ03")
	require.Equal(t, before, state(), "another group's lease: nothing acked, nothing read")

	_, err = b.readAcking(t, b.Pool, "rf", ptr("a"), "c", 2, pageA[0].LeaseID+(1<<40))
	requireSQLState(t, err, "PGQ10")
	require.Equal(t, before, state(), "unknown lease: nothing read")

	// The lease expires and another consumer takes its messages over.
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.lease SET expires_at = clock_timestamp() - interval '1 second'
		WHERE lease_id = $1`, pageA[0].LeaseID)
	require.NoError(t, err)
	taken := b.read(t, b.Pool, "rf", ptr("a"), "c2", 2, "30 seconds")
	require.ElementsMatch(t, ids(pageA), ids(taken))
	before = state()
	_, err = b.readAcking(t, b.Pool, "rf", ptr("a"), "c", 2, pageA[0].LeaseID)
	requireSQLState(t, err, "PGQ11")
	require.Equal(t, before, state(), "fenced: nothing read")
}

func uniq(xs []int64) map[int64]bool {
	m := map[int64]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}
