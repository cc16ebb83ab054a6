package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// cluster is one throwaway PostgreSQL cluster of scripts/devdb.sh.
type cluster struct {
	root string
	name string
	port int
}

func (c *cluster) devdb(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "scripts", "devdb.sh"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("devdb.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// start starts (or reuses) the cluster and returns its admin URL.
func (c *cluster) start(ctx context.Context) (string, error) {
	return c.retry(ctx, "start", c.name, strconv.Itoa(c.port))
}

// retry runs a devdb.sh command that starts a server up to 3 times: on a
// busy machine the port can be taken for a moment by the ephemeral port of
// some client connection ("Address already in use").
func (c *cluster) retry(ctx context.Context, args ...string) (string, error) {
	var err error
	for range 3 {
		var out string
		if out, err = c.devdb(ctx, args...); err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(2 * time.Second):
		}
	}
	return "", err
}

// crash stops the server with pg_ctl stop -m immediate.
func (c *cluster) crash(ctx context.Context) error {
	_, err := c.devdb(ctx, "crash", c.name)
	return err
}

func (c *cluster) stop(ctx context.Context) error {
	_, err := c.devdb(ctx, "stop", c.name)
	return err
}

func (c *cluster) destroy(ctx context.Context) error {
	_, err := c.devdb(ctx, "destroy", c.name)
	return err
}

// standbyOf creates this cluster as a streaming standby of primary
// (pg_basebackup -R) and starts it.
func (c *cluster) standbyOf(ctx context.Context, primary *cluster) (string, error) {
	return c.retry(ctx, "standby", c.name, strconv.Itoa(c.port), strconv.Itoa(primary.port))
}

func (c *cluster) promote(ctx context.Context) error {
	_, err := c.devdb(ctx, "promote", c.name)
	return err
}

// freshDatabase drops and re-creates database name, migrates it with the
// embedded migrations and adds the harness's ledger table. It returns its
// URL.
func freshDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", adminURL, err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	u := testdb.WithDatabase(adminURL, name)
	if _, err := orchestrator.MigrateURL(ctx, u); err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	db, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	// The producers' ledger: one row per transaction, inserted in that
	// transaction, so an unknown outcome (commit interrupted by a crash)
	// can be settled afterwards.
	if _, err := db.Exec(ctx, `CREATE SCHEMA chaos; CREATE TABLE chaos.txn (txn text PRIMARY KEY)`); err != nil {
		return "", fmt.Errorf("ledger table: %w", err)
	}
	if err := testdb.KeepLeaseHistory(ctx, db, "chaos"); err != nil {
		return "", err
	}
	return u, nil
}

// waitReady polls until a connection to u succeeds (bounded by ctx).
func waitReady(ctx context.Context, u string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, u)
		if err == nil {
			var ok bool
			err = c.QueryRow(ctx, `SELECT NOT pg_is_in_recovery()`).Scan(&ok)
			c.Close(context.Background())
			if err == nil && ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("database not ready within %s: %v", within, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
