package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docBlock returns the ```lang block of a page of the repository (say
// "docs/operations.md") that the page marks `<!-- e2e: run by FILE -->` for
// this test's file and whose text contains want: tests/e2e_psql.sh leaves
// such blocks to the test named, which runs them verbatim, so the page and
// the test cannot drift apart.
func docBlock(t *testing.T, page, file, lang, want string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot(t), page))
	require.NoError(t, err)
	re := regexp.MustCompile("(?s)<!-- e2e: run by " + regexp.QuoteMeta(file) + " -->\n```" + regexp.QuoteMeta(lang) + "\n(.*?)\n```")
	for _, m := range re.FindAllStringSubmatch(string(text), -1) {
		if strings.Contains(m[1], want) {
			return m[1] + "\n"
		}
	}
	require.FailNow(t, "no block for the test", "%s has no ```%s block marked <!-- e2e: run by %s --> containing %q", page, lang, file, want)
	return ""
}

// runShell runs a shell block verbatim in bash (-e -u -o pipefail) in dir,
// with env added to the test's environment and path prepended to PATH, and
// returns its combined output.
func runShell(t *testing.T, dir string, path []string, env []string, block string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "PATH="+strings.Join(append(path, os.Getenv("PATH")), string(os.PathListSeparator)))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the block, run verbatim:\n%s\noutput:\n%s", block, out)
	return string(out)
}
