package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// twoPhaseCluster is the throwaway cluster (scripts/devdb.sh, which starts
// every cluster with max_prepared_transactions = 20) where specs that
// prepare transactions run when the suite's server has
// max_prepared_transactions = 0, PostgreSQL's default. Its port is
// PGQ_TEST_TWOPC_PORT (make test: TWOPC_PORT, TEST_PORT + 7), 25440 unset.
const twoPhaseCluster = "twophase"

func twoPhasePort() string {
	if p := os.Getenv("PGQ_TEST_TWOPC_PORT"); p != "" {
		return p
	}
	return "25440"
}

// maxPreparedTransactions reads the setting of the server at url.
func maxPreparedTransactions(ctx context.Context, url string) (int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read max_prepared_transactions: %w", err)
	}
	return n, nil
}

// twoPhaseBundle is setup for a spec that prepares transactions: on the
// suite's server when it allows prepared transactions, otherwise on a
// cluster of its own (stopped when the test ends). When that cluster cannot
// be started either (no PostgreSQL server binaries beside a remote
// DATABASE_URL), it says loudly on stderr, and in the file
// PGQ_TEST_NOT_RUN that make test prints at its end, that the spec was not
// run and why, and returns nil: neither a failure nor a silent skip.
func twoPhaseBundle(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	n, err := maxPreparedTransactions(ctx, testdb.ServerURL(t))
	require.NoError(t, err)
	if n > 0 {
		return setup(t)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	script := filepath.Join(root, "scripts", "devdb.sh")
	var stderr strings.Builder
	cmd := exec.Command(script, "start", twoPhaseCluster, twoPhasePort())
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := fmt.Sprintf("%s NOT RUN: the server of DATABASE_URL has max_prepared_transactions = 0 "+
			"(PostgreSQL's default), and the suite's own cluster for it (scripts/devdb.sh start %s %s) did not start: %v\n%s"+
			"Run it with max_prepared_transactions > 0 on the server, or with PostgreSQL's server binaries installed here.",
			t.Name(), twoPhaseCluster, twoPhasePort(), err, stderr.String())
		fmt.Fprintf(os.Stderr, "\n%s\n%s\n%s\n\n", strings.Repeat("#", 80), msg, strings.Repeat("#", 80))
		t.Log(msg)
		// go test shows a passing package's output only with -v: make test
		// prints this file at its end.
		if f := os.Getenv("PGQ_TEST_NOT_RUN"); f != "" {
			fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			require.NoError(t, err)
			_, err = fmt.Fprintln(fh, msg)
			require.NoError(t, errors.Join(err, fh.Close()))
		}
		return nil
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", twoPhaseCluster).Run() })
	admin := strings.TrimSpace(string(out))
	n, err = maxPreparedTransactions(ctx, admin)
	require.NoError(t, err)
	require.Positive(t, n, "the suite's own cluster allows prepared transactions")
	t.Logf("the server of DATABASE_URL has max_prepared_transactions = 0: this spec runs on the suite's own cluster %s (%s)",
		twoPhaseCluster, admin)
	return &bundle{Bundle: testdb.NewOn(t, admin), ctx: ctx}
}
