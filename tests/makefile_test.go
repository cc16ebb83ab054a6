package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `make run` and `make test` run side by side with their defaults: the run
// listens on LISTEN, so nothing `make test` starts may be handed LISTEN (the
// tests that serve HTTP bind 127.0.0.1:0 and read the address back).
func TestMakeTestLeavesListenToMakeRun(t *testing.T) {
	t.Parallel()
	const listen = "127.0.0.1:19999"
	out, err := exec.Command("make", "-C", "..", "-n", "test", "LISTEN="+listen).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "go test", "make -n test prints the recipe")
	require.NotContains(t, string(out), listen, "make test hands LISTEN (make run's address) to its tests:\n%s", out)
	run, err := exec.Command("make", "-C", "..", "-n", "run", "LISTEN="+listen).CombinedOutput()
	require.NoError(t, err, "%s", run)
	require.True(t, strings.Contains(string(run), "--listen "+listen), "make run serves on LISTEN:\n%s", run)
}
