package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Partition management works through the topics in slices: a call visits
// at most 100 topics, says so by returning > 0 (call again), and the next
// call resumes after the last topic it visited (fanout.lock_row's
// resume_after). The work that counts as no step (recording the
// transactions a rotation waits for) is bounded too, and the running
// transactions are read once per call, not once per topic. Before, one call
// visited every topic, reading pg_locks and pg_stat_activity for each and
// returning 0 (thousands of topics: one call of seconds).
func TestMaintenancePartitionsSliceTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 105
	require.EqualValues(t, n, b.count(t, `SELECT count(fanout.create_topic('ps.t' || lpad(i::text, 3, '0')))
		FROM generate_series(1, $1::int) i`, n))
	manage := func() int64 { return b.count(t, `SELECT fanout._manage_partitions()`) }
	resume := func() int64 {
		return b.count(t, `SELECT resume_after FROM fanout.lock_row WHERE name = 'maint:manage_partitions'`)
	}
	drain := func() int {
		calls := 0
		for manage() > 0 {
			calls++
			require.Less(t, calls, 100*n, "every call makes progress")
		}
		return calls
	}
	// Every topic's next partition created and refreshed, and the
	// transactions its jump waits for recorded.
	drain()
	require.EqualValues(t, n, b.count(t, `SELECT count(*) FROM fanout.partition
		WHERE part_no = 1 AND refresh_xid IS NOT NULL AND refresh_vxids IS NOT NULL`))
	require.Zero(t, resume(), "a pass over: the next starts from the first topic")

	// Only the recording left to do, for every topic: no step, and still a
	// slice per call.
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.partition SET refresh_vxids = NULL, refresh_at = NULL WHERE part_no = 1`)
	require.NoError(t, err)
	conn := b.Conn(t)
	_, err = conn.Exec(b.ctx, `BEGIN; SET LOCAL track_functions = 'all'`)
	require.NoError(t, err)
	var got, lists int64
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT fanout._manage_partitions()`).Scan(&got))
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = 'fanout' AND funcname = '_running_vxids'`).Scan(&lists))
	_, err = conn.Exec(b.ctx, `COMMIT`)
	require.NoError(t, err)
	require.EqualValues(t, 1, got, "more to come, no step done")
	require.EqualValues(t, 1, lists, "the running transactions read once for the call, not once per topic")
	recorded := b.count(t, `SELECT count(*) FROM fanout.partition WHERE part_no = 1 AND refresh_vxids IS NOT NULL`)
	require.Positive(t, recorded)
	require.LessOrEqual(t, recorded, int64(100), "at most 100 topics a call")
	require.Positive(t, resume())
	require.EqualValues(t, n-recorded, b.count(t, `SELECT count(*) FROM fanout.partition p
		WHERE p.part_no = 1 AND p.refresh_vxids IS NULL AND p.topic_id > $1`, resume()), "the rest for the next calls")
	drain()
	require.EqualValues(t, n, b.count(t, `SELECT count(*) FROM fanout.partition WHERE part_no = 1 AND refresh_vxids IS NOT NULL`))
	require.Zero(t, resume())
}

// Dead-group detection works through the active groups in slices of 1,000
// (resuming after the last group on the next call) and begins no group
// after 250 ms: before, every call computed the misses of every active
// group (15,000 groups: seconds a call) and never said how far it got.
func TestMaintenanceDeadGroupsSliceGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const per = 510 // two topics: 1,020 groups
	for _, topic := range []string{"dg.a", "dg.b"} {
		b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'")
		require.EqualValues(t, per, b.count(t, `SELECT count(*) FROM generate_series(1, $2::int) i,
			LATERAL fanout.subscribe($1, 'g' || i) s`, topic, per))
	}
	// Six minutes on, every group (heartbeat_timeout 5 minutes) missed one.
	detect := func() int64 {
		return b.count(t, `SELECT fanout._detect_dead_groups(p_now => now() + interval '6 minutes')`)
	}
	resume := func() int64 {
		return b.count(t, `SELECT resume_after FROM fanout.lock_row WHERE name = 'maint:detect_dead_groups'`)
	}
	missed := func() int64 {
		return b.count(t, `SELECT count(*) FROM fanout.consumer_group WHERE missed_heartbeats = 1`)
	}
	require.Positive(t, detect())
	first := missed()
	require.Positive(t, first)
	require.LessOrEqual(t, first, int64(1000), "at most 1,000 groups a call")
	require.Positive(t, resume(), "the next call resumes after this one's last group")
	require.EqualValues(t, 2*per-first, b.count(t, `SELECT count(*) FROM fanout.consumer_group
		WHERE missed_heartbeats = 0 AND group_id > $1`, resume()), "the rest for the next calls")
	calls := 1
	for detect() > 0 {
		calls++
		require.Less(t, calls, 2*per, "every call makes progress")
	}
	require.EqualValues(t, 2*per, missed())
	require.Zero(t, resume())
}

// A STABLE (or IMMUTABLE) function may be called any number of times per
// row, or not at all, and its result reused: it must have no side effect,
// nor call a fanout function that has one. fanout._may, which views filter
// by, noted the allowed caller with set_config; that note is
// fanout._authorize's now (VOLATILE, and so are the functions calling it).
func TestStableFunctionsHaveNoSideEffects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.Pool.Query(b.ctx, `
		WITH f AS (
			SELECT p.oid::regprocedure::text AS sig, p.proname, p.provolatile, p.prosrc
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = 'fanout'),
		effect AS (  -- side effects of their own
			SELECT f.* FROM f
			WHERE f.prosrc ~* '\m(set_config|nextval|setval|pg_advisory_\w+|pg_notify)\s*\(')
		SELECT f.sig FROM f
		WHERE f.provolatile IN ('s', 'i')
		  AND (f.sig IN (SELECT e.sig FROM effect e)
		       OR EXISTS (SELECT 1 FROM effect e  -- a call outside quoted text (hints name functions)
		                  WHERE strpos(regexp_replace(f.prosrc, '''[^'']*''', '', 'g'), 'fanout.' || e.proname || '(') > 0))
		ORDER BY 1`)
	require.NoError(t, err)
	var bad []string
	for rows.Next() {
		var f string
		require.NoError(t, rows.Scan(&f))
		bad = append(bad, f)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, bad, "STABLE or IMMUTABLE functions with a side effect, or calling one")
}

// Partition management creates at most 8 partition tables per call, a
// reference-mode topic's completion partition counting as a second one:
// a creation is a table, its TOAST table and one index build per index,
// each build syncing its new file to disk, so it is the one step whose time
// is the disk's, not the CPU's. The rest on the next calls, resuming at the
// first topic not done. Before, a call created up to 50 partitions (all of
// them within its 250 ms on a fast disk, and on a slow one a call ran
// 250 ms plus a whole creation past it).
func TestMaintenancePartitionCreationsPerCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const plain, ref = 20, 6
	require.EqualValues(t, plain, b.count(t, `SELECT count(fanout.create_topic('pc.a' || lpad(i::text, 3, '0')))
		FROM generate_series(1, $1::int) i`, plain))
	require.EqualValues(t, ref, b.count(t, `SELECT count(fanout.create_topic('pc.b' || lpad(i::text, 3, '0'),
		semantics => 'pubsub', completion => 'reference')) FROM generate_series(1, $1::int) i`, ref))
	tables := func() int64 { // partition tables made ahead: a message partition, and a completion one in reference mode
		return b.count(t, `SELECT count(*) + count(*) FILTER (WHERE t.completion = 'reference')
			FROM fanout.partition p JOIN fanout.topic t USING (topic_id) WHERE p.part_no = 1`)
	}
	manage := func() int64 { return b.count(t, `SELECT fanout._manage_partitions()`) }
	calls, before := 0, int64(0)
	for {
		got := manage()
		calls++
		made := tables() - before
		before += made
		require.LessOrEqual(t, made, int64(8), "call %d: at most 8 partition tables created", calls)
		if before < plain+2*ref {
			require.Positive(t, got, "call %d: more to come", calls)
			require.Positive(t, made, "call %d: every call makes progress", calls)
		}
		if got == 0 {
			break
		}
		require.Less(t, calls, 100, "the calls converge")
	}
	require.EqualValues(t, plain+2*ref, tables(), "every topic's next partition made")
	require.GreaterOrEqual(t, calls, (plain+2*ref+7)/8, "no call made more than 8")
}

// The selection of a partition-management or partition-cleanup call reads
// the rows of fanout.partition of the topics it visits, not of every topic:
// a call resuming near the end of the topics reads a few rows per topic
// left. Before, partition management's look-up of each topic's next
// partition was planned as a merge join scanning fanout.partition from the
// first topic, and cleanup's test for a closed partition as a hashed
// subplan reading every closed partition: every call read rows in
// proportion to all topics, a pass over n topics n^2/100.
func TestMaintenanceSelectionReadsOnlyItsSlice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, left = 150, 10
	require.EqualValues(t, n, b.count(t, `SELECT count(fanout.create_topic('sel.t' || lpad(i::text, 3, '0'),
		retention => '1 day', zero_subscription_retention => '1 day', partition_interval => '1 minute'))
		FROM generate_series(1, $1::int) i`, n))
	require.EqualValues(t, n, b.count(t, `SELECT count(fanout.publish('sel.t' || lpad(i::text, 3, '0'), '{}'))
		FROM generate_series(1, $1::int) i`, n))
	drain := func(f string) {
		for calls := 0; b.count(t, `SELECT `+f+`(p_now => now() + interval '2 minutes')`) > 0; calls++ {
			require.Less(t, calls, 100*n, "%s: every call makes progress", f)
		}
	}
	// Every topic's first partition closed (rotated into its next one),
	// its next one made: nothing left to do for either function (retention
	// a day).
	drain("fanout._manage_partitions")
	require.EqualValues(t, n, b.count(t, `SELECT count(*) FROM fanout.partition WHERE part_no = 0 AND closed_at IS NOT NULL`))
	drain("fanout._manage_partitions")
	require.EqualValues(t, n, b.count(t, `SELECT count(*) FROM fanout.partition WHERE part_no = 2`))
	drain("fanout._cleanup_partitions")
	require.EqualValues(t, 3*n, b.count(t, `SELECT count(*) FROM fanout.partition`))

	// Per topic visited (three partitions each): partition management
	// reads the open and the next partition; cleanup reads its candidates
	// and checks them (summaries, what each group has passed).
	for _, c := range []struct {
		fn, lock string
		per      int64
	}{
		{"fanout._manage_partitions", "maint:manage_partitions", 4},
		{"fanout._cleanup_partitions", "maint:cleanup_partitions", 20},
	} {
		// Resume after all but the last few topics.
		_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.lock_row SET resume_after = (SELECT topic_id FROM fanout.topic
			ORDER BY topic_id OFFSET $2 LIMIT 1) WHERE name = $1`, c.lock, n-left-1)
		require.NoError(t, err)
		conn := b.Conn(t)
		_, err = conn.Exec(b.ctx, `BEGIN`)
		require.NoError(t, err)
		var got, read int64
		require.NoError(t, conn.QueryRow(b.ctx, `SELECT `+c.fn+`(p_now => now() + interval '2 minutes')`).Scan(&got))
		require.NoError(t, conn.QueryRow(b.ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
			FROM pg_stat_xact_user_tables WHERE relid = 'fanout.partition'::regclass`).Scan(&read))
		_, err = conn.Exec(b.ctx, `COMMIT`)
		require.NoError(t, err)
		require.Zero(t, got, "%s: nothing to do, the pass ends", c.fn)
		t.Logf("%s: %d rows of fanout.partition read for %d topics", c.fn, read, left)
		defer func() {
			require.LessOrEqual(t, read, c.per*left, "%s: a few rows per topic visited, not every topic's", c.fn)
		}()
	}
}

// A usage measurement call's quota sums do not call a function per topic:
// fanout._grant_matches (not inlined: it has SET search_path) was called
// twice per topic and bytes quota on every call, most of a call's CPU time
// at thousands of topics. The quota still blocks and unblocks (the
// tenant quota tests).
func TestMaintenanceUsageSumsCallNothingPerTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.grant_topic('mu.%', current_user::regrole, 'admin'),
		fanout.set_quota('mu.%', current_user::regrole, 'admin', max_bytes => 1000000000000)`)
	require.NoError(t, err)
	require.EqualValues(t, n, b.count(t, `SELECT count(fanout.create_topic('mu.t' || lpad(i::text, 3, '0')))
		FROM generate_series(1, $1::int) i`, n))
	conn := b.Conn(t)
	_, err = conn.Exec(b.ctx, `BEGIN; SET LOCAL track_functions = 'all'`)
	require.NoError(t, err)
	var measured, matches int64
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT fanout._measure_usage()`).Scan(&measured))
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = 'fanout' AND funcname = '_grant_matches'`).Scan(&matches))
	_, err = conn.Exec(b.ctx, `COMMIT`)
	require.NoError(t, err)
	require.Positive(t, measured)
	require.Less(t, matches, int64(n), "no call per topic")
}

// Partition cleanup drops a partition without emptying it first when its
// parent is free: TRUNCATE builds every index of the partition anew, each
// build syncing its new file to disk, for nothing when the drop follows in
// the same call (before, every partition was truncated and then dropped:
// several file syncs per partition, most of cleanup's time at thousands of
// topics). While another transaction holds the parent, the partition is
// emptied with TRUNCATE as before and dropped by a later call.
func TestMaintenanceCleanupDropsWithoutTruncate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, topic := range []string{"ct.free", "ct.held"} {
		b.createTopic(t, b.Pool, topic, "semantics => 'pubsub'", "retention => '1 minute'", "zero_subscription_retention => '1 minute'",
			"partition_interval => '1 minute'")
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.publish($1, '{}')`, topic)
		require.NoError(t, err)
	}
	for calls := 0; b.count(t, `SELECT fanout._manage_partitions(p_now => now() + interval '2 minutes')`) > 0; calls++ {
		require.Less(t, calls, 100)
	}
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM fanout.partition WHERE part_no = 0 AND closed_at IS NOT NULL`))
	// Every TRUNCATE of the closed partitions, counted.
	_, err := b.Pool.Exec(b.ctx, `CREATE TABLE public.truncates (relname text);
		CREATE FUNCTION public.count_truncate() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN INSERT INTO public.truncates VALUES (TG_TABLE_NAME); RETURN NULL; END$$`)
	require.NoError(t, err)
	rels := map[string]string{}
	for _, topic := range []string{"ct.free", "ct.held"} {
		var data, rel string
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT t.data_table, p.relname FROM fanout.topic t
			JOIN fanout.partition p USING (topic_id) WHERE t.topic = $1 AND p.part_no = 0`, topic).Scan(&data, &rel))
		_, err := b.Pool.Exec(b.ctx, `CREATE TRIGGER count_truncate BEFORE TRUNCATE ON fanout_data.`+rel+`
			FOR EACH STATEMENT EXECUTE FUNCTION public.count_truncate()`)
		require.NoError(t, err)
		rels[topic] = data
	}
	// Another transaction holds ct.held's parent table (not its partition).
	holder := b.Conn(t)
	_, err = holder.Exec(b.ctx, `BEGIN; LOCK TABLE ONLY fanout_data.`+rels["ct.held"]+` IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	cleanup := func() {
		for calls := 0; b.count(t, `SELECT fanout._cleanup_partitions(p_now => now() + interval '10 minutes')`) > 0; calls++ {
			require.Less(t, calls, 100)
		}
	}
	cleanup()
	part0 := func(topic string) int64 {
		return b.count(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
			WHERE t.topic = $1 AND p.part_no = 0`, topic)
	}
	require.Zero(t, part0("ct.free"), "dropped")
	require.EqualValues(t, 1, part0("ct.held"), "emptied, kept while its parent is held")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = 'ct.held' AND p.part_no = 0 AND p.truncated_at IS NOT NULL`))
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM public.truncates WHERE relname LIKE $1 || '%'`, rels["ct.free"]+"_p"),
		"a partition dropped in the same call is not truncated first")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM public.truncates WHERE relname LIKE $1 || '%'`, rels["ct.held"]+"_p"))
	_, err = holder.Exec(b.ctx, `COMMIT`)
	require.NoError(t, err)
	cleanup()
	require.Zero(t, part0("ct.held"), "dropped once its parent is free")
}

// The dedupe sweep of bookkeeping cleanup passes at most 100 topics per
// call (sizing a topic's table of keys opens it: a lock held to the end of
// the call and a look at its file), resuming at the next topic on the next
// call. Before, a call passed up to 1,000 topics: a second of wall time on
// a loaded machine at 5,000 topics.
func TestMaintenanceDedupeSweepSlicesTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 110
	require.EqualValues(t, n, b.count(t, `SELECT count(fanout.create_topic('ds.t' || lpad(i::text, 3, '0')))
		FROM generate_series(1, $1::int) i`, n))
	sweep := func() int64 { return b.count(t, `SELECT fanout._cleanup_bookkeeping()`) }
	at := func() int64 { return b.count(t, `SELECT coalesce(topic_id, 0) FROM fanout.dedupe_sweep`) }
	first := sweep()
	require.Positive(t, first)
	require.LessOrEqual(t, first, int64(100), "at most 100 topics passed by one call")
	require.Positive(t, at(), "the pass goes on at a later topic")
	require.GreaterOrEqual(t, b.count(t, `SELECT count(*) FROM fanout.topic WHERE topic_id >= $1`, at()), int64(n-100),
		"the rest for the next calls")
	calls := 1
	for sweep() > 0 {
		calls++
		require.Less(t, calls, 10*n, "the calls converge")
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL OR topic_id IS NOT NULL`),
		"the pass is over")
}
