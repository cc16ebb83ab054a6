package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// notInClient are the functions granted to fanout_producer or
// fanout_consumer that the client leaves to SQL, and why.
var notInClient = map[string]string{
	"channel_name":    "the consumer reads the channel from fanout.topics",
	"capture_table":   "table capture is set up once, by a migration or an operator, not by an application's client",
	"uncapture_table": "as capture_table",
	"partition_stats": "a monitoring view (key partitions' owners and lag), read with SQL or the console",
	"subscribe":       "groups are subscribed by a migration or an operator (fanout.subscribe), before consumers start",
	"set_filter":      "a group's filter is set where the group is subscribed (fanout.subscribe(..., filter =>)) or by an operator",
}

// The client covers the SQL API: every parameter of every function granted
// to the producer and consumer roles is passed by one of the client's
// statements (written in named notation, so the parameter's name appears as
// "name =>"), unless the function is listed in notInClient; and every PGQ
// code that docs/errors.md documents has a Code constant. A new parameter or
// function, or a new documented code, fails this test until the client
// covers it.
func TestClientCoversTheSQLAPI(t *testing.T) {
	t.Parallel()
	b, ctx := setup(t)

	// The string constants of the package's own (non-test) files.
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	used := map[string]map[string]bool{} // function → parameter names the client passes
	consts := map[string]bool{}          // values of string constants
	call := regexp.MustCompile(`fanout\.(\w+)\(`)
	named := regexp.MustCompile(`(\w+)\s*=>`)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			consts[s] = true
			locs := call.FindAllStringSubmatchIndex(s, -1)
			for i, loc := range locs {
				end := len(s)
				if i+1 < len(locs) {
					end = locs[i+1][0]
				}
				fn := s[loc[2]:loc[3]]
				if used[fn] == nil {
					used[fn] = map[string]bool{}
				}
				for _, m := range named.FindAllStringSubmatch(s[loc[1]:end], -1) {
					used[fn][m[1]] = true
				}
			}
			return true
		})
	}

	rows, err := b.Pool.Query(ctx, `
		SELECT p.proname, coalesce((SELECT array_agg(a.n ORDER BY a.i)
		                            FROM unnest(p.proargnames, p.proargmodes) WITH ORDINALITY a(n, m, i)
		                            WHERE a.n IS NOT NULL AND coalesce(a.m, 'i') IN ('i', 'b', 'v')), '{}')
		FROM pg_proc p
		WHERE p.pronamespace = 'fanout'::regnamespace AND p.proname !~ '^_'
		  AND (has_function_privilege('fanout_producer', p.oid, 'EXECUTE')
		       OR has_function_privilege('fanout_consumer', p.oid, 'EXECUTE'))
		  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
		ORDER BY 1`)
	require.NoError(t, err)
	var missing []string
	fns := 0
	for rows.Next() {
		var fn string
		var params []string
		require.NoError(t, rows.Scan(&fn, &params))
		fns++
		if _, ok := notInClient[fn]; ok {
			continue
		}
		if used[fn] == nil {
			missing = append(missing, "fanout."+fn+" (no statement calls it)")
			continue
		}
		for _, p := range params {
			if !used[fn][p] {
				missing = append(missing, "fanout."+fn+"("+p+" =>)")
			}
		}
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, fns, "no function granted to fanout_producer or fanout_consumer?")
	require.Empty(t, missing, "SQL API without a counterpart in the client")
	for _, fn := range []string{"publish", "publish_batch", "read", "ack", "nack", "extend_lease", "heartbeat"} {
		require.NotNil(t, used[fn], "the client calls fanout.%s", fn)
	}

	doc, err := os.ReadFile(filepath.Join("..", "docs", "errors.md"))
	require.NoError(t, err)
	codes := regexp.MustCompile("(?m)^\\| `(PGQ\\d\\d)`").FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, codes, "docs/errors.md lists no PGQ code")
	var noConst []string
	for _, c := range codes {
		if !consts[c[1]] {
			noConst = append(noConst, c[1])
		}
	}
	slices.Sort(noConst)
	require.Empty(t, noConst, "PGQ codes of docs/errors.md without a Code constant in the client")
}
