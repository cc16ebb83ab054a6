package client_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/pgfanout/pgq/internal/testdb"
)

// TestMain gives the Example functions a migrated database of their own:
// they read DATABASE_URL as an application would, so it is pointed there
// (testdb has already resolved the server from the original value).
func TestMain(m *testing.M) {
	b, err := testdb.NewMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		os.Exit(1)
	}
	os.Setenv("DATABASE_URL", b.URL) //nolint:errcheck
	code := m.Run()
	if err := b.Drop(); err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
	}
	os.Exit(code)
}
