package chaos

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/internal/testdb"
)

func failoverTopics() []topicSpec {
	common := `max_attempts => 1000, partition_interval => '1 minute', retention => '1 minute'`
	return []topicSpec{
		{name: "fo.queue", create: common, isQueue: true, complete: "queue",
			groups: []groupSpec{{workers: []string{kindSQL, kindClient}}}},
		{name: "fo.offset", create: `semantics => 'pubsub', ` + common, complete: "offset",
			groups: []groupSpec{{name: "o1", workers: []string{kindSQL}}, {name: "o2", workers: []string{kindClientTx}}}},
		{name: "fo.ref", create: `semantics => 'pubsub', completion => 'reference', ` + common, complete: "reference",
			groups: []groupSpec{{name: "r1", workers: []string{kindSQL, kindClient}}}},
	}
}

// runFailover is the primary-failover scenario: a primary and a streaming
// standby made with pg_basebackup -R, synchronous (synchronous_standby_names
// '*', synchronous_commit on) or asynchronous replication. Producers,
// consumers and the sidecar use one multi-host URL with
// target_session_attrs=read-write. Mid-load the primary is stopped with
// pg_ctl stop -m immediate and the standby promoted; everyone reconnects to
// it. Synchronous: nothing may be lost. Asynchronous: the transactions whose
// COMMIT returned OK but that the new primary lacks are the loss window,
// measured and reported.
func runFailover(ctx context.Context, cfg Config, out io.Writer, sync bool) (*verdict, error) {
	mode := "async"
	if sync {
		mode = "sync"
	}
	log := cfg.Logger.With("scenario", "failover-"+mode)
	primary := &cluster{root: cfg.Root, name: "chaos-fo-p", port: cfg.FailoverPort}
	standby := &cluster{root: cfg.Root, name: "chaos-fo-s", port: cfg.FailoverPort + 1}
	for _, c := range []*cluster{primary, standby} {
		if err := c.destroy(ctx); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, c := range []*cluster{primary, standby} {
			_ = c.stop(context.Background())
		}
	}()
	admin, err := primary.start(ctx)
	if err != nil {
		return nil, err
	}
	const dbName = "chaos_fo"
	if _, err := freshDatabase(ctx, admin, dbName); err != nil {
		return nil, err
	}
	if _, err := standby.standbyOf(ctx, primary); err != nil {
		return nil, err
	}
	pconn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer pconn.Close(context.Background())
	if sync {
		// Only now, on the primary alone: the standby copied
		// postgresql.auto.conf and would otherwise wait for a standby of
		// its own once promoted.
		if _, err := pconn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
			return nil, err
		}
		if _, err := pconn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return nil, err
		}
	}
	want := "async"
	if sync {
		want = "sync"
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := pconn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`,
			want).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("failover: no %s streaming standby after 60 s", want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pconn.Close(ctx)
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		primary.port, standby.port, dbName)
	f, err := startFailoverFleet(ctx, cfg, log, "failover-"+mode, multi, dbName, 1)
	if f != nil {
		defer f.sup.stopAll(context.Background(), 10*time.Second)
	}
	if err != nil {
		return nil, err
	}
	defer f.prod.stop()
	log.Info("load running on the primary", "replication", mode, "phase", cfg.FailoverPhase)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.FailoverPhase):
	}
	// The replication lag just before the crash: what async can lose.
	lagBytes, lagWrite := int64(-1), "n/a"
	if c, err := pgx.Connect(ctx, admin); err == nil {
		_ = c.QueryRow(ctx, `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn), 0)::bigint,
			coalesce(write_lag::text, '0') FROM pg_stat_replication LIMIT 1`).Scan(&lagBytes, &lagWrite)
		c.Close(context.Background())
	}
	crashAt := time.Now()
	if err := primary.crash(ctx); err != nil {
		return nil, err
	}
	if err := standby.promote(ctx); err != nil {
		return nil, err
	}
	newURL := testdb.WithDatabase(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", standby.port), dbName)
	if err := waitReady(ctx, newURL, 60*time.Second); err != nil {
		return nil, err
	}
	promoted := time.Since(crashAt)
	log.Info("primary crashed, standby promoted", "took", promoted.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.FailoverPhase):
	}
	f.prod.stop()
	if _, err := f.drain(ctx); err != nil {
		log.Error("drain incomplete (verifying anyway)", "error", err)
	}
	f.sup.stopAll(ctx, 10*time.Second)
	v, err := verify(ctx, newURL, f.cfg.RunDir, f.topics)
	if err != nil {
		return nil, err
	}
	v.AsyncFailover = !sync
	fmt.Fprintf(out, "\n== failover-%s: primary stopped with -m immediate after %s of load, standby promoted in %s, "+
		"%s more of load on it; clients on %s\n", mode, cfg.FailoverPhase, promoted.Round(time.Millisecond),
		cfg.FailoverPhase, "a multi-host URL with target_session_attrs=read-write")
	v.print(out)
	if sync {
		fmt.Fprintf(out, "failover-sync: %d transactions (%d messages) whose COMMIT returned OK are missing on the new primary\n",
			v.Txns.CommitLost, v.CommitLostMsgs)
	} else {
		window := "none"
		if v.Txns.CommitLost > 0 {
			window = fmt.Sprintf("commits acknowledged from %s to %s before the crash",
				crashAt.Sub(time.Unix(0, v.FirstLostCommit)).Round(time.Millisecond),
				crashAt.Sub(time.Unix(0, v.LastLostCommit)).Round(time.Millisecond))
		}
		phantoms := 0
		for _, g := range v.Groups {
			phantoms += g.Phantom
		}
		fmt.Fprintf(out, "failover-async loss window: %d transactions (%d messages) whose COMMIT returned OK are missing "+
			"on the new primary (%s); %d recorded deliveries under leases the new primary never received; "+
			"replication lag sampled just before the crash: %d bytes not flushed on the standby, write_lag %s\n",
			v.Txns.CommitLost, v.CommitLostMsgs, window, phantoms, lagBytes, lagWrite)
	}
	return v, nil
}
