package tests

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Finding 5 of the tenant review: junk groups made cleanup and the groups
// view scan every closed partition once per group. Both must look at a
// closed partition a bounded number of times whatever the number of groups
// that have not reached it, and the losses they count must stay exact.
// Scans are counted with pg_stat_get_xact_numscans inside one transaction
// (it keeps counting for a partition dropped in that transaction).
func TestCleanupAndGroupsViewOnePassPerPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const junk = 200
	b.createTopic(t, b.Pool, "scale", "semantics => 'pubsub'", qPartOpts, "zombie_ttl => '3 hours'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('scale', 'junk-' || i, start_position => 'earliest')
	                              FROM generate_series(1, $1) i`, junk)
	require.NoError(t, err)
	b.subscribe(t, "scale", "half", "start_position => 'earliest'")
	b.subscribe(t, "scale", "all", "start_position => 'earliest'")

	// Two closed partitions of 40 messages each, and 5 in the open one.
	for p := 0; p < 2; p++ {
		b.qPublishN(t, b.Pool, "scale", p*40, 40)
		b.qRotate(t)
	}
	b.qPublishN(t, b.Pool, "scale", 80, 5)

	// "half" reads 20 of the first partition; "all" reads and acks everything.
	half := b.read(t, b.Pool, "scale", ptr("half"), "c", 20, "1 hour")
	require.Len(t, half, 20)
	b.ack(t, b.Pool, half[0].LeaseID, ids(half))
	for {
		page := b.read(t, b.Pool, "scale", ptr("all"), "c", 100, "1 hour")
		if len(page) == 0 {
			break
		}
		b.ack(t, b.Pool, page[0].LeaseID, ids(page))
	}
	require.Equal(t, 0, b.cleanup(t, "1 minute"), "nothing is due yet")
	// Cleanup summarizes a closed partition once every transaction older
	// than its bound has ended: the other tests' transactions on this
	// server may delay that, so wait for it.
	require.Eventually(t, func() bool {
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout._summarize_partitions(topic_id) FROM fanout.topic WHERE topic = 'scale'")
		require.NoError(t, err)
		var summarized int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `
			SELECT count(p.row_count) FROM fanout.topic t JOIN fanout.partition p USING (topic_id)
			WHERE t.topic = 'scale'`).Scan(&summarized))
		return summarized == 2
	}, 3*time.Minute, 100*time.Millisecond, "the closed partitions get their summaries")

	closed := func(q pgx.Tx) []uint32 {
		// The partitions and their indexes (index scans count on the index).
		rows, err := q.Query(b.ctx, `
			SELECT r.oid FROM fanout.partition p JOIN fanout.topic t USING (topic_id),
			     LATERAL (SELECT format('fanout_data.%I', p.relname)::regclass::oid AS oid
			              UNION ALL
			              SELECT i.indexrelid FROM pg_index i
			              WHERE i.indrelid = format('fanout_data.%I', p.relname)::regclass) r
			WHERE t.topic = 'scale' AND p.closed_at IS NOT NULL`)
		require.NoError(t, err)
		oids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(oids), 4)
		return oids
	}
	scans := func(q pgx.Tx, oids []uint32) int64 {
		var n int64
		require.NoError(t, q.QueryRow(b.ctx,
			"SELECT sum(pg_stat_get_xact_numscans(o)) FROM unnest($1::oid[]) o", oids).Scan(&n))
		return n
	}

	// The groups view: exact lag for everyone, and the closed partitions are
	// scanned only for the one group inside them ("half"; each count is at
	// most three index scans), not once per junk group.
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	oids := closed(tx)
	before := scans(tx, oids)
	var junkLag, junkGroups, halfLag, allLag int64
	require.NoError(t, tx.QueryRow(b.ctx, `
		SELECT min(lag_messages) FILTER (WHERE group_name LIKE 'junk-%'),
		       count(*) FILTER (WHERE group_name LIKE 'junk-%' AND lag_messages = 85),
		       min(lag_messages) FILTER (WHERE group_name = 'half'),
		       min(lag_messages) FILTER (WHERE group_name = 'all')
		FROM fanout.groups WHERE topic = 'scale'`).Scan(&junkLag, &junkGroups, &halfLag, &allLag))
	require.Equal(t, int64(85), junkLag, "a junk group has all 85 messages unread")
	require.Equal(t, int64(junk), junkGroups)
	require.Equal(t, int64(65), halfLag)
	require.Equal(t, int64(0), allLag)
	viewScans := scans(tx, oids) - before
	require.LessOrEqual(t, viewScans, int64(12), "closed partitions scanned %d times for %d lagging groups", viewScans, junk)
	require.NoError(t, tx.Rollback(b.ctx))

	// Cleanup past zombie_ttl: the junk groups and "half" stopped pinning
	// (idle), so both partitions go; each group's loss is exact, and the
	// partitions are scanned a bounded number of times.
	tx, err = b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	oids = closed(tx)
	before = scans(tx, oids)
	// Called again while it returns > 0 (a call begins no partition after
	// its time budget: on a loaded machine the second may be the next
	// call's).
	for calls := 1; ; calls++ {
		var done int
		require.NoError(t, tx.QueryRow(b.ctx, "SELECT fanout._cleanup_partitions(p_now => now() + interval '4 hours')").Scan(&done))
		if done == 0 {
			break
		}
		require.Less(t, calls, 10)
	}
	var left int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = 'scale' AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL`).Scan(&left))
	require.Zero(t, left, "both closed partitions emptied")
	cleanupScans := scans(tx, oids) - before
	require.LessOrEqual(t, cleanupScans, int64(24), "closed partitions scanned %d times for %d lagging groups", cleanupScans, junk)
	var junkLost, junkRight, halfLost, allLost, dropped int64
	require.NoError(t, tx.QueryRow(b.ctx, `
		SELECT min(g.lost_messages) FILTER (WHERE g.group_name LIKE 'junk-%'),
		       count(*) FILTER (WHERE g.group_name LIKE 'junk-%' AND g.lost_messages = 80),
		       min(g.lost_messages) FILTER (WHERE g.group_name = 'half'),
		       min(g.lost_messages) FILTER (WHERE g.group_name = 'all'),
		       min(t.dropped_unread)
		FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'scale'`).
		Scan(&junkLost, &junkRight, &halfLost, &allLost, &dropped))
	require.Equal(t, int64(80), junkLost, "a junk group loses both closed partitions")
	require.Equal(t, int64(junk), junkRight)
	require.Equal(t, int64(60), halfLost, "20 of the first partition were read")
	require.Equal(t, int64(0), allLost)
	require.Equal(t, int64(junk*80+60), dropped)
	var logged int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(sum(count), 0) FROM fanout.event_log
	                                       WHERE topic = 'scale' AND kind = 'unread_dropped'`).Scan(&logged))
	require.Equal(t, int64(junk*80+60), logged)
	require.NoError(t, tx.Commit(b.ctx))
	t.Logf("closed-partition scans: groups view %d, cleanup %d (%d lagging groups)", viewScans, cleanupScans, junk)
}
