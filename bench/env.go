package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/orchestrator"
)

// Env is what every scenario gets: the server, durations scaled for -quick,
// and fresh migrated databases on demand (dropped by Close).
type Env struct {
	AdminURL string // DATABASE_URL: any database on the server; we create our own beside it
	Quick    bool
	Keep     bool // keep the databases (for inspection)

	mu  sync.Mutex
	dbs []string
	// baselines records each baseline's exact definition for the output.
	baselines map[string]string
	// summary collects the fixed figures of results.json "summary".
	summary Summary
	// pgqStatus says whether Skytools PgQ was measured (the table's header).
	pgqStatus string
}

// SetSummary records one figure of results.json "summary" (key: one of
// summaryKeys; NaN = not measured).
func (e *Env) SetSummary(key string, v float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.summary.Set(key, v); err != nil {
		panic(err) // a typo in a scenario: the unit test catches it
	}
}

// SetPgQStatus records what the header says about the PgQ baseline.
func (e *Env) SetPgQStatus(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pgqStatus = s
}

// DB is one benchmark database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// Dur picks the full or the -quick duration.
func (e *Env) Dur(full, quick time.Duration) time.Duration {
	if e.Quick {
		return quick
	}
	return full
}

// N picks the full or the -quick count.
func (e *Env) N(full, quick int) int {
	if e.Quick {
		return quick
	}
	return full
}

// Logf prints progress to stderr (the table goes to stdout).
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "  "+format+"\n", args...)
}

// Baseline records the definition of a named baseline (printed and in JSON).
func (e *Env) Baseline(name, definition string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.baselines == nil {
		e.baselines = map[string]string{}
	}
	e.baselines[name] = strings.TrimSpace(definition)
}

// NewDB creates a fresh database, migrates it with the embedded migrations
// (orchestrator.MigrateURL) and returns a pool on it. maxConns 0 = 64.
func (e *Env) NewDB(ctx context.Context, label string, maxConns int32) (*DB, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "pgq_bench_" + label + "_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	e.mu.Lock()
	e.dbs = append(e.dbs, name)
	e.mu.Unlock()
	u := withDatabase(e.AdminURL, name)
	if _, err := orchestrator.MigrateURL(ctx, u); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	if maxConns <= 0 {
		maxConns = 64
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &DB{Name: name, URL: u, Pool: pool}, nil
}

// Close drops every database this run created (unless -keep).
func (e *Env) Close() {
	e.mu.Lock()
	dbs := e.dbs
	e.dbs = nil
	e.mu.Unlock()
	if e.Keep || len(dbs) == 0 {
		if e.Keep && len(dbs) > 0 {
			fmt.Fprintf(os.Stderr, "bench: kept databases %s\n", strings.Join(dbs, ", "))
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: cleanup: %v\n", err)
		return
	}
	defer admin.Close(ctx)
	for _, name := range dbs {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop %s: %v\n", name, err)
		}
	}
}

// dropLeftovers drops pgq_bench_* databases of earlier runs that crashed
// before cleaning up (only those nobody is connected to).
func dropLeftovers(ctx context.Context, adminURL string) {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, `
		SELECT d.datname FROM pg_database d
		WHERE d.datname LIKE 'pgq\_bench\_%' AND NOT d.datistemplate
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()); err == nil {
			fmt.Fprintf(os.Stderr, "bench: dropped leftover database %s\n", n)
		}
	}
}

// Close closes the pool.
func (d *DB) Close() { d.Pool.Close() }

// Conn opens a dedicated connection (open transactions, LISTEN).
func (d *DB) Conn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, d.URL)
}

// withDatabase returns u pointing at database name.
func withDatabase(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme == "" {
		return u + " dbname=" + name // key=value form
	}
	parsed.Path = "/" + name
	return parsed.String()
}

// ServerInfo describes where the run happened (results.json).
type ServerInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	// SharedMemoryPages is the page size of the server's shared memory as
	// its backend's /proc/<pid>/smaps shows it: "2 MB (huge pages)",
	// "4 kB", or "unknown" when the server is not on this machine. With
	// 4 kB pages every backend faults in each shared buffer it touches for
	// the first time, which dominates a member storm (docs/architecture.md, "Member storm").
	SharedMemoryPages string `json:"shared_memory_pages"`
}

// sharedMemoryPages reads the page size of the shared memory mapping of
// backend pid (see ServerInfo.SharedMemoryPages).
func sharedMemoryPages(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return "unknown"
	}
	if strings.Contains(string(b), "/anon_hugepage") {
		return "2 MB (huge pages)"
	}
	return "4 kB"
}

func serverInfo(ctx context.Context, adminURL string) (ServerInfo, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return ServerInfo{}, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer conn.Close(ctx)
	si := ServerInfo{Settings: map[string]string{}}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT version(), pg_backend_pid()").Scan(&si.Version, &pid); err != nil {
		return si, err
	}
	si.SharedMemoryPages = sharedMemoryPages(pid)
	rows, err := conn.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings
		WHERE name IN ('synchronous_commit', 'fsync', 'full_page_writes', 'shared_buffers', 'max_connections',
		               'wal_level', 'max_wal_size', 'autovacuum', 'commit_delay', 'work_mem', 'jit', 'huge_pages')
		ORDER BY name`)
	if err != nil {
		return si, err
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return si, err
		}
		si.Settings[k] = v
	}
	return si, rows.Err()
}
