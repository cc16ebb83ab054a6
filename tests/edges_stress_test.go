package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The delivery rule under load: every group receives every message whose
// transaction commits after its subscription committed (plus the history its
// start position asks for), never one that rolled back, whatever the
// publisher's isolation level, while maintenance rotates and reclaims
// partitions every 40 ms with retention 0 and groups join and leave.
//
// Producers publish unique keys to a queue topic, an offset-mode and a
// reference-mode pubsub topic, in READ COMMITTED and REPEATABLE READ
// transactions with random delays, savepoints rolled back, batches and whole
// rollbacks. Consumers (2-3 per group) read small pages, ack, nack for an
// immediate retry, let leases expire, and ack late. Late groups subscribe
// mid-run (latest, earliest, capped earliest) and churn groups subscribe and
// unsubscribe. At the end every group must have every key it is owed.
// PGQ_STRESS_SECONDS sets the load phase (default 12).
func TestEdgesStress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seconds := 12
	if s := os.Getenv("PGQ_STRESS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		seconds = n
	}
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const opts = "partition_interval => '1 minute', retention => '0', zero_subscription_retention => '0', max_attempts => 1000"
	for _, sql := range []string{
		"SELECT fanout.create_topic('sq', " + opts + ")",
		"SELECT fanout.create_topic('so', semantics => 'pubsub', " + opts + ")",
		"SELECT fanout.create_topic('sr', semantics => 'pubsub', completion => 'reference', " + opts + ")",
		"SELECT fanout.subscribe('so', 'o1')", "SELECT fanout.subscribe('so', 'o2')",
		"SELECT fanout.subscribe('sr', 'r1')", "SELECT fanout.subscribe('sr', 'r2')",
	} {
		_, err := pool.Exec(b.ctx, sql)
		require.NoError(t, err, sql)
	}

	if os.Getenv("PGQ_STRESS_AUDIT") != "" {
		stressAudit(b.ctx, t, pool)
	}
	st := newStressState()
	loadCtx, stopLoad := context.WithTimeout(b.ctx, time.Duration(seconds)*time.Second)
	defer stopLoad()
	consumeCtx, stopConsume := context.WithCancel(b.ctx)
	defer stopConsume()

	var load, consumers sync.WaitGroup
	for p := 0; p < 4; p++ {
		load.Add(1)
		go func() { defer load.Done(); st.produce(loadCtx, t, pool, p) }()
	}
	groups := []stressGroup{{"sq", ""}, {"so", "o1"}, {"so", "o2"}, {"sr", "r1"}, {"sr", "r2"}}
	startConsumers := func(g stressGroup, n int) {
		for c := 0; c < n; c++ {
			consumers.Add(1)
			go func() { defer consumers.Done(); st.consume(consumeCtx, t, pool, g, c) }()
		}
	}
	for i, g := range groups {
		startConsumers(g, 2+i%2)
	}
	load.Add(2)
	go func() { defer load.Done(); stressMaintain(loadCtx, t, pool) }()
	go func() { defer load.Done(); st.churn(loadCtx, t, pool) }()

	// Late joiners, a third of the way in.
	select {
	case <-time.After(time.Duration(seconds) * time.Second / 3):
	case <-loadCtx.Done():
	}
	type lateGroup struct {
		g   stressGroup
		all bool
	}
	var lates []lateGroup
	for _, late := range []struct {
		topic, group, args string
	}{
		{"so", "late_latest", "'latest'"}, {"so", "late_earliest", "'earliest'"},
		{"so", "late_capped", "'earliest', max_backfill => 50"},
		{"sr", "late_latest", "'latest'"}, {"sr", "late_earliest", "'earliest'"},
		{"sr", "late_capped", "'earliest', max_backfill => 50"},
	} {
		_, err := pool.Exec(b.ctx, fmt.Sprintf("SELECT fanout.subscribe('%s', '%s', %s)", late.topic, late.group, late.args))
		require.NoError(t, err)
		g := stressGroup{late.topic, late.group}
		// History is owed as retained and as the backfill scope allows
		// (retention 0 here, pending_only in reference mode): the unit tests
		// cover it; this run checks what committed after the subscription.
		lates = append(lates, lateGroup{g, false})
		groups = append(groups, g)
		startConsumers(g, 2)
	}
	load.Wait()
	for _, l := range lates {
		st.owe(b.ctx, t, pool, l.g, l.all)
	}
	load.Wait()

	// Drain: consumers go on until every group has what it is owed (or a
	// generous deadline passes; the report then names what is missing).
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		_, _ = pool.Exec(b.ctx, "SELECT fanout._bitmap_step()")
		if st.missingTotal(groups) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopConsume()
	consumers.Wait()

	for _, e := range st.firstErrors() {
		t.Logf("error: %s", e)
	}
	if st.missingTotal(groups) > 0 {
		stressDiagnose(b.ctx, t, pool)
		for _, g := range groups {
			st.diagnoseMissing(b.ctx, t, pool, g)
		}
		if os.Getenv("PGQ_STRESS_AUDIT") != "" {
			for _, g := range groups {
				st.auditMissing(b.ctx, t, pool, g)
			}
		}
	}
	for _, g := range groups {
		owed, got, missing, ghost := st.report(g)
		t.Logf("%-4s %-14s committed-owed %6d delivered %6d missing %d rolled-back-delivered %d",
			g.topic, g.group, owed, got, missing, ghost)
		assert.Zero(t, missing, "%s/%s lost messages", g.topic, g.group)
		assert.Zero(t, ghost, "%s/%s got rolled-back messages", g.topic, g.group)
	}
	require.Zero(t, st.errs.Load(), "unexpected errors: %v", st.firstErrors())
	var problems []string
	rows, err := pool.Query(b.ctx, "SELECT coalesce(topic, '') || ': ' || coalesce(problem, '') FROM fanout.check_consistency()")
	require.NoError(t, err)
	problems, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, problems)
	t.Logf("committed %d keys (%d rolled back), %d churn groups", st.commitCount(), st.rolledBack(), st.churned())
}

type stressGroup struct{ topic, group string }

// stressState is what producers committed and consumers received.
type stressState struct {
	mu         sync.Mutex
	committed  []string        // keys in commit order (a key goes to all three topics)
	txids      []string        // parallel to committed: the publishing transaction
	ghosts     map[string]bool // keys whose transaction (or savepoint) rolled back
	got        map[stressGroup]map[string]bool
	owedOnly   map[stressGroup]map[string]bool // late groups: the keys they are owed
	churnCount int
	errs       countErr
}

type countErr struct {
	mu   sync.Mutex
	n    int
	msgs []string
}

func (c *countErr) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if len(c.msgs) < 5 {
		c.msgs = append(c.msgs, err.Error())
	}
}

func (c *countErr) Load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newStressState() *stressState {
	return &stressState{ghosts: map[string]bool{}, got: map[stressGroup]map[string]bool{},
		owedOnly: map[stressGroup]map[string]bool{}}
}

func (s *stressState) firstErrors() []string {
	s.errs.mu.Lock()
	defer s.errs.mu.Unlock()
	return s.errs.msgs
}

func (s *stressState) commitCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.committed)
}

func (s *stressState) rolledBack() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ghosts)
}

func (s *stressState) churned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.churnCount
}

// owe computes, once the load has stopped, what a late group is owed:
// every key whose transaction its subscription's snapshot (join_snap) did
// not see, i.e. everything that committed after the subscription (and, for
// an uncapped earliest, everything).
func (s *stressState) owe(ctx context.Context, t *testing.T, pool *pgxpool.Pool, g stressGroup, all bool) {
	s.mu.Lock()
	keys, txids := append([]string(nil), s.committed...), append([]string(nil), s.txids...)
	s.mu.Unlock()
	owed := map[string]bool{}
	if all {
		for _, k := range keys {
			owed[k] = true
		}
	} else {
		rows, err := pool.Query(ctx, `
			SELECT u.k FROM unnest($3::text[], $4::xid8[]) AS u(k, x)
			WHERE NOT pg_visible_in_snapshot(u.x, (SELECT g.join_snap FROM fanout.consumer_group g
			                                        JOIN fanout.topic t USING (topic_id)
			                                        WHERE t.topic = $1 AND g.group_name = $2))`,
			g.topic, g.group, keys, txids)
		require.NoError(t, err)
		ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, k := range ks {
			owed[k] = true
		}
	}
	s.mu.Lock()
	s.owedOnly[g] = owed
	s.mu.Unlock()
}

// owed: the keys a group must receive.
func (s *stressState) owed(g stressGroup) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	only, late := s.owedOnly[g]
	if !late {
		return append([]string(nil), s.committed...)
	}
	keys := make([]string, 0, len(only))
	for k := range only {
		keys = append(keys, k)
	}
	return keys
}

func (s *stressState) missingTotal(groups []stressGroup) int {
	n := 0
	for _, g := range groups {
		_, _, missing, _ := s.report(g)
		n += missing
	}
	return n
}

func (s *stressState) report(g stressGroup) (owed, got, missing, ghost int) {
	keys := s.owed(g)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if !s.got[g][k] {
			missing++
		}
	}
	for k := range s.got[g] {
		if s.ghosts[k] {
			ghost++
		}
	}
	return len(keys), len(s.got[g]), missing, ghost
}

func (s *stressState) delivered(g stressGroup, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got[g] == nil {
		s.got[g] = map[string]bool{}
	}
	s.got[g][key] = true
}

// produce publishes keys p<n>-<i> to all three topics per transaction.
func (s *stressState) produce(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	for i := 0; ctx.Err() == nil; i++ {
		iso := pgx.ReadCommitted
		if rng.IntN(3) == 0 {
			iso = pgx.RepeatableRead
		}
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("begin: %w", err))
			}
			return
		}
		if iso == pgx.RepeatableRead {
			// Take the snapshot now; publish later.
			_, _ = tx.Exec(ctx, "SELECT count(*) FROM fanout.topic")
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		}
		var keys, undone []string
		var txid string
		ok := true
		if err = tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&txid); err != nil {
			ok = false
		}
		for j := 0; j < 1+rng.IntN(3) && ok; j++ {
			key := fmt.Sprintf("p%d-%d-%d", n, i, j)
			payload := fmt.Sprintf(`{"k":%q}`, key)
			switch rng.IntN(4) {
			case 0: // rolled back to a savepoint
				_, err = tx.Exec(ctx, "SAVEPOINT s")
				if err == nil {
					err = stressPublish(ctx, tx, payload, false)
				}
				if err == nil {
					_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
				}
				undone = append(undone, key)
			case 1: // a batch of two
				key2 := key + "b"
				_, err = tx.Exec(ctx, `SELECT fanout.publish_batch(t, ARRAY[$1::jsonb, $2::jsonb]) FROM unnest(ARRAY['sq','so','sr']) t`,
					payload, fmt.Sprintf(`{"k":%q}`, key2))
				keys = append(keys, key, key2)
			default:
				err = stressPublish(ctx, tx, payload, false)
				keys = append(keys, key)
			}
			ok = err == nil
		}
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		if !ok || rng.IntN(10) == 0 {
			_ = tx.Rollback(ctx)
			s.mu.Lock()
			for _, k := range append(keys, undone...) {
				s.ghosts[k] = true
			}
			s.mu.Unlock()
			if !ok && ctx.Err() == nil {
				s.errs.add(fmt.Errorf("publish: %w", err))
			}
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("commit: %w", err))
			}
			return
		}
		s.mu.Lock()
		s.committed = append(s.committed, keys...)
		for range keys {
			s.txids = append(s.txids, txid)
		}
		for _, k := range undone {
			s.ghosts[k] = true
		}
		s.mu.Unlock()
	}
}

func stressPublish(ctx context.Context, tx pgx.Tx, payload string, _ bool) error {
	_, err := tx.Exec(ctx, `SELECT fanout.publish(t, $1::jsonb) FROM unnest(ARRAY['sq','so','sr']) t`, payload)
	return err
}

// consume reads pages of a group and records every key it acks.
func (s *stressState) consume(ctx context.Context, t *testing.T, pool *pgxpool.Pool, g stressGroup, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(len(g.group))))
	var group *string
	if g.group != "" {
		group = &g.group
	}
	consumer := fmt.Sprintf("%s-%d", g.group, n)
	for ctx.Err() == nil {
		lease := "2 seconds"
		if rng.IntN(20) == 0 {
			lease = "50 milliseconds"
		}
		ms, err := readMsgs(ctx, pool, g.topic, group, consumer, 1+rng.IntN(20), lease)
		if err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("read %s/%s: %w", g.topic, g.group, err))
			}
			return
		}
		if len(ms) == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		switch r := rng.IntN(25); {
		case r == 0: // let the lease expire: the page comes back
			continue
		case r == 1: // nack one for an immediate retry
			_, err = pool.Exec(ctx, "SELECT fanout.nack($1, $2, '0')", ms[0].LeaseID, []int64{ms[0].MessageID})
			if err != nil && ctx.Err() == nil && qState(err) != "PGQ11" {
				s.errs.add(fmt.Errorf("nack: %w", err))
			}
			ms = ms[1:]
		case r == 2 && lease == "50 milliseconds": // ack late: fenced, or still fine
			time.Sleep(80 * time.Millisecond)
		}
		if len(ms) == 0 {
			continue
		}
		msgIDs := make([]int64, len(ms))
		for i, m := range ms {
			msgIDs[i] = m.MessageID
		}
		_, err = pool.Exec(ctx, "SELECT fanout.ack($1, $2)", ms[0].LeaseID, msgIDs)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "PGQ11" {
			continue // fenced: another member has them now
		}
		if err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("ack of %v under lease %d: %w (partitions then: %s)",
					msgIDs, ms[0].LeaseID, err, stressPartitions(ctx, pool)))
			}
			return
		}
		for _, m := range ms {
			var p struct {
				K string `json:"k"`
			}
			if json.Unmarshal(m.Payload, &p) == nil {
				s.delivered(g, p.K)
			}
		}
	}
}

// churn subscribes short-lived groups to the reference topic (and the offset
// one), reads a little, and unsubscribes them.
func (s *stressState) churn(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	starts := []string{"'latest'", "'earliest'", "'earliest', max_backfill => 10"}
	for i := 0; ctx.Err() == nil; i++ {
		topic := []string{"sr", "so"}[i%2]
		name := fmt.Sprintf("churn%d", i)
		if _, err := pool.Exec(ctx, fmt.Sprintf("SELECT fanout.subscribe('%s', '%s', %s)", topic, name, starts[i%3])); err != nil {
			if ctx.Err() == nil {
				s.errs.add(fmt.Errorf("churn subscribe: %w", err))
			}
			return
		}
		for j := 0; j < 3 && ctx.Err() == nil; j++ {
			ms, err := readMsgs(ctx, pool, topic, &name, "c", 10, "5 seconds")
			if err == nil && len(ms) > 0 {
				_, err = pool.Exec(ctx, "SELECT fanout.ack($1)", ms[0].LeaseID)
			}
			if err != nil && ctx.Err() == nil {
				s.errs.add(fmt.Errorf("churn read: %w", err))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf("SELECT fanout.unsubscribe('%s', '%s')", topic, name)); err != nil && ctx.Err() == nil {
			s.errs.add(fmt.Errorf("churn unsubscribe: %w", err))
			return
		}
		s.mu.Lock()
		s.churnCount++
		s.mu.Unlock()
	}
}

// stressMaintain rotates and reclaims every 40 ms as if an hour had passed
// each time (retention 0), and steps bitmap jobs.
func stressMaintain(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	for ctx.Err() == nil {
		for _, sql := range []string{
			"SELECT fanout._manage_partitions(now() + interval '1 hour')",
			"SELECT fanout._cleanup_partitions(now() + interval '1 hour')",
			"SELECT fanout._bitmap_step()", "SELECT fanout._bitmap_step()",
			"SELECT fanout._cleanup_groups()",
		} {
			if _, err := pool.Exec(ctx, sql); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", sql, err)
				return
			}
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// stressPartitions describes each topic's partitions as recorded and as
// attached (messages and completion tables), for an error that names one.
func stressPartitions(ctx context.Context, pool *pgxpool.Pool) string {
	var out string
	err := pool.QueryRow(ctx, `
		SELECT string_agg(format('%s: recorded %s; attached %s', t.data_table,
		         (SELECT string_agg(format('%s%s%s%s', p.part_no, CASE WHEN p.closed_at IS NOT NULL THEN 'c' END,
		                                   CASE WHEN p.truncated_at IS NOT NULL THEN 't' END,
		                                   '/' || pg_xact_status(p.created_xid)), ' ' ORDER BY p.part_no)
		            FROM fanout.partition p WHERE p.topic_id = t.topic_id),
		         (SELECT string_agg(i.inhrelid::regclass::text, ' ' ORDER BY i.inhrelid::regclass::text)
		            FROM pg_inherits i
		           WHERE i.inhparent IN (format('fanout_data.%I', t.data_table)::regclass,
		                                 coalesce(to_regclass(format('fanout_data.%I', t.data_table || '_done')), 0)))),
		         '; ')
		FROM fanout.topic t`).Scan(&out)
	if err != nil {
		return err.Error()
	}
	return out
}

// stressWhere says where a key's message is now: its id, or that it is gone.
func stressWhere(ctx context.Context, pool *pgxpool.Pool, table, key string) string {
	var out string
	err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(format('id %s txid %s', x.id, x.txid), ', '), 'gone')
		FROM fanout_data.`+table+` x WHERE x.payload->>'k' = $1`, key).Scan(&out)
	if err != nil {
		return err.Error()
	}
	return out
}

// stressDiagnose logs the state that explains missing messages: groups,
// reference stamps, pending reconciliations, bitmap jobs, lock waits.
func stressDiagnose(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	for _, q := range []string{
		`SELECT string_agg(format('%s/%s %s bit=%s cur=%s:%s lo=%s hi=%s', t.topic, g.group_name, g.status, g.bit_no,
		        g.cur_txid, g.cur_id, g.win_lo, g.win_hi), E'\n')
		   FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id) WHERE g.status <> 'cancelled'`,
		`SELECT format('topic_state mask=%s epoch=%s live=%s', required_mask, epoch, pg_sequence_last_value(epoch_seq))
		   FROM fanout.topic_state`,
		`SELECT format('stamp_pending rows=%s distinct txids=%s', count(*), count(DISTINCT txid)) FROM fanout.stamp_pending`,
		`SELECT coalesce(string_agg(format('job %s %s %s next=%s upto=%s fence=%s', group_id, kind, status, next_id, upto_id, fence_txids), E'\n'), 'no jobs')
		   FROM fanout.bitmap_job WHERE status IN ('not_started', 'in_progress')`,
		`SELECT coalesce(string_agg(format('bit %s: required %s, completed %s', b, r, c), E'\n'), 'no messages')
		   FROM (SELECT b, count(*) FILTER (WHERE (m.required_groups & (1::bigint << b)) <> 0) AS r,
		                (SELECT count(DISTINCT u.id) FROM fanout_data.m3_done d, unnest(d.ids) AS u(id)
		                  WHERE d.bit = b) AS c
		           FROM fanout_data.m3 m, generate_series(0, 4) AS b GROUP BY b) x`,
		`SELECT coalesce(string_agg(format('pid %s waits %s: %s', pid, wait_event, left(query, 80)), E'\n'), 'no waiters')
		   FROM pg_stat_activity WHERE wait_event_type = 'Lock'`,
		`SELECT format('retry rows %s, open leases %s', (SELECT count(*) FROM fanout.retry), (SELECT count(*) FROM fanout.lease WHERE open_count > 0))`,
	} {
		var out string
		if err := pool.QueryRow(ctx, q).Scan(&out); err != nil {
			t.Logf("diagnose: %v", err)
			continue
		}
		t.Logf("diagnose:\n%s", out)
	}
}

// diagnoseMissing logs, for a few keys a group is missing, where the message
// is and what the group's leases did with it.
func (s *stressState) diagnoseMissing(ctx context.Context, t *testing.T, pool *pgxpool.Pool, g stressGroup) {
	keys := s.owed(g)
	s.mu.Lock()
	var missing []string
	for _, k := range keys {
		if !s.got[g][k] && len(missing) < 3 {
			missing = append(missing, k)
		}
	}
	s.mu.Unlock()
	for _, k := range missing {
		var out string
		table := map[string]string{"sq": "m1", "so": "m2", "sr": "m3"}[g.topic]
		err := pool.QueryRow(ctx, `
			SELECT format('%s/%s key %s: message %s txid %s; leases: %s; retry %s; dead %s', t.topic, $2::text, $3::text, m.id, m.txid,
			       (SELECT string_agg(format('#%s %s settled=%s reclaimed=%s open=%s', l.lease_id, l.consumer,
			                                 m.id = ANY (l.settled), m.id = ANY (l.reclaimed), l.open_count), '; ')
			          FROM fanout.lease l JOIN fanout.consumer_group cg ON cg.group_id = l.group_id
			         WHERE m.id = ANY (l.msg_ids) AND cg.topic_id = t.topic_id
			           AND cg.group_name IS NOT DISTINCT FROM nullif($2, '')),
			       (SELECT count(*) FROM fanout.retry r WHERE r.message_id = m.id),
			       (SELECT count(*) FROM fanout.dead_letter d WHERE d.message_id = m.id))
			FROM fanout.topic t, LATERAL (SELECT * FROM fanout_data.`+table+` x WHERE x.payload->>'k' = $3) m
			WHERE t.topic = $1`, g.topic, g.group, k).Scan(&out)
		if err != nil {
			t.Logf("diagnose %s/%s %s: %v", g.topic, g.group, k, err)
			continue
		}
		t.Logf("diagnose: %s", out)
	}
}

// stressAudit (PGQ_STRESS_AUDIT=1) records every move of a group's position
// with the topic's partitions at that moment, so that a missing message can
// be traced to the read that passed it.
func stressAudit(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	for _, sql := range []string{
		`CREATE TABLE public.stress_pos (at timestamptz DEFAULT clock_timestamp(), pid int DEFAULT pg_backend_pid(),
		   tx xid8 DEFAULT pg_current_xact_id(), group_id bigint, old_lo pg_snapshot, old_hi pg_snapshot,
		   old_cur xid8, old_id bigint, new_lo pg_snapshot, new_hi pg_snapshot, new_cur xid8, new_id bigint,
		   parts text, snap pg_snapshot DEFAULT pg_current_snapshot(), delivered bigint, seen text)`,
		// seen: for the topic's two newest partitions, the rows a scan of the
		// parent finds in their id range / the rows in the partition itself,
		// in one statement: fewer through the parent means this backend's
		// partition list lacks the partition.
		`CREATE FUNCTION public.stress_pos_trg() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		 DECLARE v_seen text; r record; v_a bigint; v_b bigint;
		 BEGIN
		   FOR r IN SELECT p.relname, p.lo_id, p.hi_id, t.data_table FROM fanout.partition p
		            JOIN fanout.topic t USING (topic_id)
		            WHERE p.topic_id = new.topic_id ORDER BY p.part_no DESC LIMIT 2 LOOP
		     BEGIN
		       EXECUTE format('SELECT (SELECT count(*) FROM fanout_data.%I WHERE id >= $1 AND id < $2),
		                              (SELECT count(*) FROM ONLY fanout_data.%I)', r.data_table, r.relname)
		         INTO v_a, v_b USING r.lo_id, r.hi_id;
		       v_seen := concat_ws(' ', v_seen, format('%s:%s/%s', r.relname, v_a, v_b));
		     EXCEPTION WHEN OTHERS THEN
		       v_seen := concat_ws(' ', v_seen, format('%s:%s', r.relname, SQLERRM));
		     END;
		   END LOOP;
		   INSERT INTO public.stress_pos (group_id, old_lo, old_hi, old_cur, old_id, new_lo, new_hi, new_cur, new_id, parts,
		                                  delivered, seen)
		   VALUES (new.group_id, old.win_lo, old.win_hi, old.cur_txid, old.cur_id, new.win_lo, new.win_hi,
		           new.cur_txid, new.cur_id,
		           (SELECT string_agg(format('%s[%s,%s,%s]', p.part_no, p.created_xid, coalesce(p.txid_bound::text, 'open'),
		                                     pg_xact_status(p.created_xid)), ' ' ORDER BY p.part_no)
		              FROM fanout.partition p WHERE p.topic_id = new.topic_id),
		           new.delivered - old.delivered, v_seen);
		   RETURN NULL;
		 END $$`,
		`CREATE TRIGGER stress_pos AFTER UPDATE ON fanout.consumer_group FOR EACH ROW
		 WHEN (old.cur_txid IS DISTINCT FROM new.cur_txid OR old.cur_id IS DISTINCT FROM new.cur_id
		       OR old.win_hi::text IS DISTINCT FROM new.win_hi::text)
		 EXECUTE FUNCTION public.stress_pos_trg()`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
}

// auditMissing logs the position moves of a group over windows that held a
// missing message.
func (s *stressState) auditMissing(ctx context.Context, t *testing.T, pool *pgxpool.Pool, g stressGroup) {
	keys := s.owed(g)
	s.mu.Lock()
	var missing []string
	txidOf := map[string]string{}
	for i, k := range s.committed {
		txidOf[k] = s.txids[i]
	}
	for _, k := range keys {
		if !s.got[g][k] && len(missing) < 2 {
			missing = append(missing, k)
		}
	}
	s.mu.Unlock()
	table := map[string]string{"sq": "m1", "so": "m2", "sr": "m3"}[g.topic]
	for _, k := range missing {
		rows, err := pool.Query(ctx, `
			SELECT format('%s pid %s tx %s: old lo=%s hi=%s cur=%s:%s -> new lo=%s hi=%s cur=%s:%s parts %s snap %s',
			              a.at, a.pid, a.tx, a.old_lo, a.old_hi, a.old_cur, a.old_id, a.new_lo, a.new_hi, a.new_cur, a.new_id,
			              a.parts, a.snap)
			FROM fanout.topic tp
			JOIN fanout.consumer_group cg ON cg.topic_id = tp.topic_id AND cg.group_name IS NOT DISTINCT FROM nullif($2, '')
			CROSS JOIN LATERAL (SELECT $4::xid8 AS txid, $3::text AS k) m
			JOIN public.stress_pos a ON a.group_id = cg.group_id
			WHERE tp.topic = $1
			  AND ((pg_visible_in_snapshot(m.txid, a.new_hi) AND NOT pg_visible_in_snapshot(m.txid, a.new_lo))
			       OR (pg_visible_in_snapshot(m.txid, a.old_hi) AND NOT pg_visible_in_snapshot(m.txid, a.old_lo)))
			ORDER BY a.at LIMIT 12`, g.topic, g.group, k, txidOf[k])
		if err != nil {
			t.Logf("audit %s/%s %s: %v", g.topic, g.group, k, err)
			continue
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Logf("audit %s/%s %s: %v", g.topic, g.group, k, err)
			continue
		}
		t.Logf("audit %s/%s key %s (txid %s, in %s now: %s):", g.topic, g.group, k, txidOf[k], table,
			stressWhere(ctx, pool, table, k))
		for _, l := range lines {
			t.Logf("  %s", l)
		}
	}
}
