package tests

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// readAcking calls read(..., ack => lease) and returns the page (ack 0: no ack).
func (b *bundle) readAcking(t *testing.T, q querier, topic string, group *string, consumer string, max int,
	ack int64) ([]msg, error) {
	t.Helper()
	rows, err := q.Query(b.ctx, `SELECT lease_id, message_id, payload, headers, message_group, published_at, attempt
		FROM fanout.read($1, $2, $3, max_messages => $4, lease => '30 seconds', ack => $5)`,
		topic, group, consumer, max, nullLease(ack))
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
				`SELECT coalesce((SELECT open_count FROM fanout.lease WHERE lease_id = fanout._lease_raw($1::bigint)), 0)`, prev).Scan(&open))
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
// happens: a lease of another group (PGQ10, as an unknown one), an unknown lease (PGQ10), a
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
	requireSQLState(t, err, "PGQ10")
	require.Equal(t, before, state(), "another group's lease: nothing acked, nothing read")

	_, err = b.readAcking(t, b.Pool, "rf", ptr("a"), "c", 2, pageA[0].LeaseID+(1<<40))
	requireSQLState(t, err, "PGQ10")
	require.Equal(t, before, state(), "unknown lease: nothing read")

	// The lease expires and another consumer takes its messages over.
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.lease SET expires_at = clock_timestamp() - interval '1 second'
		WHERE lease_id = fanout._lease_raw($1)`, pageA[0].LeaseID)
	require.NoError(t, err)
	taken := b.read(t, b.Pool, "rf", ptr("a"), "c2", 2, "30 seconds")
	require.ElementsMatch(t, ids(pageA), ids(taken))
	before = state()
	_, err = b.readAcking(t, b.Pool, "rf", ptr("a"), "c", 2, pageA[0].LeaseID)
	requireSQLState(t, err, "PGQ11")
	require.Equal(t, before, state(), "fenced: nothing read")
}

// nullLease: lease id 0 is no lease (NULL).
func nullLease(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

func uniq(xs []int64) map[int64]bool {
	m := map[int64]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// A consumer that acks each page with its next read (one transaction per
// page, the shipped client's loop) updates its lease slot twice in that
// transaction (the ack, then the next page). The three versions of the row
// must fit its heap page, so that the updates stay HOT and the table does not
// grow with the pages: before the page arrays were compressed in line, a
// page of 100 made a 2-3 kB row and nearly every read moved it to a new heap
// page. And a page settled in full (its settled list is then left empty)
// acks again as nothing, by whole lease or by ids.
func TestReadAckKeepsLeaseSlotSmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rs", "semantics => 'pubsub'")
	b.subscribe(t, "rs", "g1")
	b.subscribe(t, "rs", "g2")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish_batch('rs', array_agg(jsonb_build_object('n', i)))
		FROM generate_series(1, 20000) i`)
	require.NoError(t, err)
	// Two groups at once, each on its own connection: the other's
	// transactions keep the last version of a row from being pruned at once,
	// as any concurrent traffic does.
	last := make([]int64, 2)
	errs := make(chan error, 2)
	for i, g := range []string{"g1", "g2"} {
		go func() {
			conn, err := b.Pool.Acquire(b.ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			var prev int64
			pages := 0
			for {
				var page []msg
				if page, err = b.readAcking(t, conn, "rs", ptr(g), "c", 100, prev); err != nil {
					errs <- err
					return
				}
				if len(page) == 0 {
					break
				}
				prev = page[0].LeaseID
				pages++
			}
			last[i] = prev
			if pages != 200 {
				errs <- fmt.Errorf("%s: %d pages, want 200", g, pages)
				return
			}
			errs <- nil
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	// Three versions of a slot's row (the page, its ack, the next page) must
	// fit one heap page for the updates to stay HOT: under concurrent
	// traffic the oldest cannot always be pruned before the third is
	// written. Uncompressed, a page of 100 made a row of 2.2 kB (3 kB once
	// acked) and the table grew by about a heap page per page read (1.4 MB
	// in this test); compressed in line, ~0.65 kB.
	var biggest int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT max(pg_column_size(l.*)) FROM fanout.lease l`).Scan(&biggest))
	require.Less(t, biggest, 1024, "a lease slot of a page of 100 is compressed in line")
	prev := last[0]

	var settled, open int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT cardinality(settled), open_count FROM fanout.lease
		WHERE lease_id = fanout._lease_raw($1)`, prev).Scan(&settled, &open))
	require.Equal(t, 0, open)
	require.Equal(t, 0, settled, "a page settled in full keeps no second copy of its ids")
	require.Empty(t, b.read(t, b.Pool, "rs", ptr("g1"), "c", 100, "30 seconds"))
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.ack($1)`, prev).Scan(&n))
	require.Zero(t, n, "acked again: nothing more settled")
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.ack($1, ARRAY[(SELECT msg_ids[1] FROM fanout.lease
		WHERE lease_id = fanout._lease_raw($1))])`, prev).Scan(&n))
	require.Zero(t, n, "acked again by id: nothing more settled")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.ack($1, ARRAY[-5]::bigint[])`, prev)
	requireSQLState(t, err, "PGQ12")
	var problems int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&problems))
	require.Zero(t, problems)
}

// drop_topic leaves nothing of the topic in fanout_data: its message
// tables, sequence and every generated function (insert, page, rows,
// completion), for each kind of topic.
func TestDropTopicLeavesNoGeneratedObjects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ topic, opts string }{
		{"dq", ""},
		{"dp", "semantics => 'pubsub'"},
		{"dr", "semantics => 'pubsub', completion => 'reference'"},
		{"dk", "semantics => 'pubsub', partitions => 4"},
	} {
		if c.opts == "" {
			b.createTopic(t, b.Pool, c.topic)
		} else {
			b.createTopic(t, b.Pool, c.topic, c.opts)
		}
		var table string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`,
			c.topic).Scan(&table))
		objects := func() int64 {
			return b.count(t, `SELECT (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			                           WHERE n.nspname = 'fanout_data' AND p.proname LIKE $1 || '\_%')
			                        + (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			                           WHERE n.nspname = 'fanout_data' AND (c.relname = $1 OR c.relname LIKE $1 || '\_%'))`,
				table)
		}
		require.Positive(t, objects(), "%s: created", c.topic)
		var dropped bool
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.drop_topic($1, force => true)`, c.topic).Scan(&dropped))
		require.True(t, dropped)
		require.Zero(t, objects(), "%s: nothing left in fanout_data", c.topic)
	}
}

// The consume grant is checked once per call (fanout._enter_topic for a
// read, which has fanout._may's check inline; fanout._may for an ack): a read with
// ack => checks it once (before, the ack inside it checked again), and an
// ack of a page this transaction was handed checks nothing more; nothing is
// remembered past the transaction: an ack after the grant was revoked, in a
// transaction of its own, is refused (PGQ21). Counted with
// pg_stat_xact_user_functions (track_functions = all, this transaction's
// calls only).
func TestGrantCheckedOncePerCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	cons, _ := b.tRole(t, "cons_once", "fanout_consumer")
	b.tGrant(t, b.Pool, "once.%", cons, "consume")
	b.createTopic(t, b.Pool, "once.t")
	for i := 0; i < 3; i++ {
		b.publish(t, b.Pool, "once.t", fmt.Sprintf(`{"n":%d}`, i))
	}
	conn := b.Conn(t)
	mayCalls := func() int64 {
		var n int64
		require.NoError(t, conn.QueryRow(b.ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
			WHERE schemaname = 'fanout' AND funcname IN ('_may', '_enter_topic')`).Scan(&n))
		return n
	}
	begin := func() {
		_, err := conn.Exec(b.ctx, "BEGIN; SET LOCAL track_functions = 'all'; SET LOCAL ROLE "+pgx.Identifier{cons}.Sanitize())
		require.NoError(t, err)
	}
	begin()
	first, err := b.readAcking(t, conn, "once.t", nil, "w", 1, 0)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.EqualValues(t, 1, mayCalls(), "one read: one check")
	next, err := b.readAcking(t, conn, "once.t", nil, "w", 1, first[0].LeaseID)
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.EqualValues(t, 2, mayCalls(), "read with ack =>: one check, none for its ack")
	require.Equal(t, 1, b.ack(t, conn, next[0].LeaseID, nil))
	require.EqualValues(t, 2, mayCalls(), "an ack of a page handed out in this transaction: no check")
	_, err = conn.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)

	// A page read, then the grant revoked, then its ack in a new transaction.
	begin()
	last, err := b.readAcking(t, conn, "once.t", nil, "w", 1, 0)
	require.NoError(t, err)
	require.Len(t, last, 1)
	_, err = conn.Exec(b.ctx, "COMMIT")
	require.NoError(t, err)
	var removed bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.revoke_topic('once.%', $1::regrole, 'consume')", cons).Scan(&removed))
	require.True(t, removed)
	begin()
	_, err = conn.Exec(b.ctx, "SELECT fanout.ack($1)", last[0].LeaseID)
	requireSQLState(t, err, "PGQ10") // no grant: as a lease that does not exist
	_, err = conn.Exec(b.ctx, "ROLLBACK")
	require.NoError(t, err)
}
