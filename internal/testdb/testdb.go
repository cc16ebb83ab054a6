// Package testdb gives each test its own PostgreSQL database, cloned from a
// template database that was migrated once with the same embedded migrations
// the pgq-scheduler binary applies (so tests exercise production SQL).
//
// The server comes from DATABASE_URL; without it, the throwaway cluster of
// scripts/devdb.sh is started (as `make test` does), so `go test ./...`
// works on its own too.
package testdb

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq"
)

// VersionTable matches orchestrator.VersionTable (kept apart to avoid an
// import cycle with the orchestrator's own tests).
const VersionTable = "public.fanout_schema_version"

// Bundle is what a test gets: a pool on its own freshly migrated database.
type Bundle struct {
	Pool   *pgxpool.Pool
	URL    string // connection string of the test database
	DBName string
	Admin  string // connection string of the server's maintenance database
}

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
	tplMu      sync.Mutex
	tpls       = map[string]*tplState{} // by server URL
)

// tplState is the migrated template database of one server.
type tplState struct {
	once sync.Once
	name string
	err  error
}

// ServerURL returns the URL of the server the tests use, starting the
// throwaway cluster (on TEST_PORT, default 25433) when DATABASE_URL is not set.
func ServerURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if u := os.Getenv("DATABASE_URL"); u != "" {
			serverURL = u
			return
		}
		root, err := repoRoot()
		if err != nil {
			serverErr = err
			return
		}
		port := os.Getenv("TEST_PORT")
		if port == "" {
			port = "25433"
		}
		out, err := exec.Command(filepath.Join(root, "scripts", "devdb.sh"), "start", "test", port).Output()
		if err != nil {
			serverErr = fmt.Errorf("starting the throwaway PostgreSQL (scripts/devdb.sh): %w", err)
			return
		}
		serverURL = strings.TrimSpace(string(out))
	})
	require.NoError(t, serverErr)
	return serverURL
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// WithDatabase returns the URL u pointing at database name instead.
func WithDatabase(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme == "" {
		// key=value form
		return u + " dbname=" + name
	}
	parsed.Path = "/" + name
	return parsed.String()
}

// WithUser returns the URL u logging in as user (no password: the
// throwaway cluster trusts local connections).
func WithUser(u, user string) string {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme == "" {
		return u + " user=" + user
	}
	parsed.User = url.User(user)
	return parsed.String()
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(pgq.Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(pgq.Migrations(), path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12], err
}

// template makes sure the migrated template database exists (once per
// process; across processes an advisory lock serialises creators).
func template(ctx context.Context, t testing.TB, admin string) string {
	t.Helper()
	tplMu.Lock()
	st := tpls[admin]
	if st == nil {
		st = &tplState{}
		tpls[admin] = st
	}
	tplMu.Unlock()
	st.once.Do(func() { st.name, st.err = makeTemplate(ctx, admin) })
	require.NoError(t, st.err)
	return st.name
}

// makeTemplate creates the migrated template on server admin unless it
// exists (across processes an advisory lock serialises creators).
func makeTemplate(ctx context.Context, admin string) (tplName string, tplErr error) {
	hash, err := migrationsHash()
	if err != nil {
		tplErr = err
		return
	}
	tplName = "pgq_tpl_" + hash
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tplErr = fmt.Errorf("connect to %s: %w", admin, err)
		return
	}
	defer conn.Close(ctx)
	if _, err = conn.Exec(ctx, "SELECT pg_advisory_lock(872364)"); err != nil {
		tplErr = err
		return
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock(872364)") //nolint:errcheck
	var exists bool
	if err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)",
		tplName).Scan(&exists); err != nil {
		tplErr = err
		return
	}
	if exists {
		return
	}
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{tplName}.Sanitize())
	if _, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{tplName}.Sanitize()); err != nil {
		tplErr = err
		return
	}
	if tplErr = migrateURL(ctx, WithDatabase(admin, tplName)); tplErr != nil {
		return
	}
	_, tplErr = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{tplName}.Sanitize()+" WITH IS_TEMPLATE true")
	return tplName, tplErr
}

func migrateURL(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return err
	}
	if err := m.LoadMigrations(pgq.Migrations()); err != nil {
		return err
	}
	return m.Migrate(ctx)
}

// New creates a database for this test from the migrated template and
// returns a pool on it; the database is dropped when the test ends.
func New(t testing.TB) *Bundle {
	t.Helper()
	return NewOn(t, ServerURL(t))
}

// NewOn is New on another server than the suite's (admin: a URL of its
// maintenance database), e.g. a cluster a test started for a setting the
// suite's server may lack.
func NewOn(t testing.TB, admin string) *Bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl := template(ctx, t, admin)
	b, err := create(ctx, admin, tpl)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("PGQ_KEEP_FAILED_DB") != "" {
			b.Pool.Close()
			t.Logf("testdb: kept database %s of the failed test (PGQ_KEEP_FAILED_DB)", b.DBName)
			return
		}
		if err := b.Drop(); err != nil {
			t.Logf("testdb: %v", err)
		}
	})
	return b
}

// NewMain is New for TestMain, where there is no *testing.T yet (example
// functions, for one, share a database made here). The caller drops the
// database with Bundle.Drop.
func NewMain() (*Bundle, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var tb mainTB
	var b *Bundle
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil && r != errMainTB {
				panic(r)
			}
		}()
		admin := ServerURL(&tb)
		tpl := template(ctx, &tb, admin)
		b, err = create(ctx, admin, tpl)
	}()
	if tb.err != nil {
		return nil, tb.err
	}
	return b, err
}

func create(ctx context.Context, admin, tpl string) (*Bundle, error) {
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	name := "pgq_t_" + hex.EncodeToString(rb[:])

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", admin, err)
	}
	_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{tpl}.Sanitize()))
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}

	dbURL := WithDatabase(admin, name)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Bundle{Pool: pool, URL: dbURL, DBName: name, Admin: admin}, nil
}

// Drop closes the pool and drops the database.
func (b *Bundle) Drop() error {
	b.Pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.Admin)
	if err != nil {
		return fmt.Errorf("cleanup connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{b.DBName}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", b.DBName, err)
	}
	return nil
}

// mainTB is the part of testing.TB that template and ServerURL use, for
// NewMain: a failed require stops the helper with errMainTB.
type mainTB struct {
	testing.TB
	err error
}

var errMainTB = errors.New("testdb: setup failed")

func (m *mainTB) Helper() {}
func (m *mainTB) Errorf(format string, args ...any) {
	m.err = fmt.Errorf(format, args...)
}
func (m *mainTB) FailNow() { panic(errMainTB) }

// Conn opens a dedicated connection to the test database (for tests that
// need a session of their own: open transactions, LISTEN, roles).
func (b *Bundle) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a logger or a
// child process) and readers (the test).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
