package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// longTxTopics: an offset-mode and a reference-mode topic, one SQL and one
// client consumer each.
func longTxTopics() []topicSpec {
	common := `max_attempts => 1000, partition_interval => '1 minute', retention => '1 minute'`
	return []topicSpec{
		{name: "lt.offset", create: `semantics => 'pubsub', ` + common, complete: "offset",
			groups: []groupSpec{{name: "a", workers: []string{kindSQL}}, {name: "b", workers: []string{kindClient}}}},
		{name: "lt.ref", create: `semantics => 'pubsub', completion => 'reference', ` + common, complete: "reference",
			groups: []groupSpec{{name: "c", workers: []string{kindSQL}}}},
	}
}

// runLongTx is the long-transaction scenario: while producers and consumers
// run, one transaction publishes to each topic and stays open for
// cfg.LongTx, and another holds an xid (and so the cluster's xmin) without
// publishing. Halfway, partitions are rotated under the open publisher
// (fanout._manage_partitions with the clock 2 minutes ahead). Before the
// long transactions end, producers stop and every other committed message
// must reach every group with them still open (consumers keep pace: a long
// transaction delays only its own messages). Then they commit and their
// messages must arrive too. The usual verifier judges the whole run.
func runLongTx(ctx context.Context, cfg Config, out io.Writer) (*verdict, error) {
	log := cfg.Logger.With("scenario", "longtx")
	cl := &cluster{root: cfg.Root, name: cfg.Cluster, port: cfg.Port}
	admin, err := cl.start(ctx)
	if err != nil {
		return nil, err
	}
	const dbName = "chaos_longtx"
	dbURL, err := freshDatabase(ctx, admin, dbName)
	if err != nil {
		return nil, err
	}
	runDir := filepath.Join(cfg.RunDir, "longtx")
	lcfg := cfg
	lcfg.RunDir = runDir
	lcfg.LateAcks = 0
	sup := &supervisor{runDir: cfg.RunDir, log: log, restartDelay: 2 * time.Second}
	if err := mkdir(runDir); err != nil {
		return nil, err
	}
	sup.runDir = runDir
	f := &fleet{cfg: lcfg, url: dbURL, adminDB: dbURL, dbName: dbName, topics: longTxTopics(), sup: sup}
	defer sup.stopAll(context.Background(), 10*time.Second)
	if err := f.setup(ctx); err != nil {
		return nil, err
	}
	if err := f.startSchedulers(1); err != nil {
		return nil, err
	}
	if err := f.startWorkers(); err != nil {
		return nil, err
	}
	if err := f.startProducers(ctx); err != nil {
		return nil, err
	}
	defer f.prod.stop()

	rec, err := newRecorder(filepath.Join(runDir, "longtx.rec"))
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	long, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer long.Close(context.Background())
	xidOnly, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer xidOnly.Close(context.Background())
	time.Sleep(time.Second)
	if _, err := xidOnly.Exec(ctx, `BEGIN; SELECT pg_current_xact_id()`); err != nil {
		return nil, fmt.Errorf("longtx: xid holder: %w", err)
	}
	var txns []string
	tx, err := long.Begin(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range f.topics {
		txn := "long-" + t.name
		txns = append(txns, txn)
		if err := rec.write(line("B", txn, t.name, 1)); err != nil {
			return nil, err
		}
		p, _ := json.Marshal(map[string]string{"k": txn + ".0"})
		if _, err := tx.Exec(ctx, `INSERT INTO chaos.txn VALUES ($1)`, txn); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `SELECT fanout.publish($1, $2::jsonb)`, t.name, string(p)); err != nil {
			return nil, fmt.Errorf("longtx: publish: %w", err)
		}
	}
	opened := time.Now()
	log.Info("long transactions open", "hold", cfg.LongTx)

	// Hold; rotate halfway; sample the lag.
	var maxLag int64
	rotated := false
	admin2, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer admin2.Close(context.Background())
	producing := cfg.LongTx * 3 / 4
	for time.Since(opened) < producing {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		var lag int64
		if err := admin2.QueryRow(ctx, `SELECT coalesce(max(lag_messages), 0) FROM fanout.groups`).Scan(&lag); err == nil {
			maxLag = max(maxLag, lag)
		}
		if !rotated && time.Since(opened) > producing/2 {
			for range 3 { // create, refresh, jump: one step per call
				if _, err := admin2.Exec(ctx, `SELECT fanout._manage_partitions(now() + interval '2 minutes')`); err != nil {
					return nil, fmt.Errorf("longtx: rotation: %w", err)
				}
			}
			rotated = true
			log.Info("partitions rotated under the open transaction")
		}
	}
	f.prod.stop()
	// Everything else must arrive while the long transactions are open.
	drainCfg := f.cfg
	drainCfg.DrainTimeout = max(cfg.LongTx/4, 15*time.Second)
	f.cfg = drainCfg
	took, derr := f.drain(ctx)
	mid, err := verify(ctx, dbURL, runDir, f.topics)
	if err != nil {
		return nil, err
	}
	behind, _, _ := mid.totals()
	open := time.Since(opened)
	// (The long transactions' own keys do not count yet: they have no
	// outcome in the records and no ledger row visible.)
	// Hold them for the whole of cfg.LongTx.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(opened.Add(cfg.LongTx))):
	}
	if err := tx.Commit(ctx); err != nil {
		_ = rec.write(line("U", txns[0], err))
		return nil, fmt.Errorf("longtx: commit: %w", err)
	}
	for _, txn := range txns {
		_ = rec.write(line("C", txn))
	}
	if _, err := xidOnly.Exec(ctx, `COMMIT`); err != nil {
		return nil, err
	}
	f.cfg.DrainTimeout = cfg.DrainTimeout
	if _, err := f.drain(ctx); err != nil {
		log.Error("final drain incomplete", "error", err)
	}
	sup.stopAll(ctx, 10*time.Second)
	v, err := verify(ctx, dbURL, runDir, f.topics)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n== longtx: a publishing transaction and an xid holder open for %s (rotation under them at %s)\n",
		open.Round(time.Second), (producing / 2).Round(time.Second))
	fmt.Fprintf(out, "while open: max lag %d messages; after producers stopped, every other committed message "+
		"delivered to every group in %s with the transactions still open: %v (still missing: %d)\n",
		maxLag, took.Round(100*time.Millisecond), derr == nil && behind == 0, behind)
	v.print(out)
	if derr != nil || behind != 0 {
		return v, fmt.Errorf("longtx: consumers did not keep pace with a long transaction open (missing %d; %v)",
			behind, derr)
	}
	return v, nil
}
