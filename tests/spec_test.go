package tests

// Interleaving specs: scripted schedules of several sessions against one
// database, in the spirit of PostgreSQL's isolation tester. Each file in
// tests/specs is one scenario; TestSpecs runs each in its own database.
//
// Format (one step per line; a line that starts with white space continues
// the step above):
//
//	# Free text: what the scenario does.
//	# invariant: the rule it protects (required).
//	setup:  SQL                 run on the checker's connection (autocommit)
//	NAME:   SQL                 run on session NAME (opened on first use)
//	NAME&:  SQL                 start on session NAME without waiting (it may block)
//	await:  NAME                wait for NAME's background step to finish
//	check:  SQL                 on the checker's connection: must return one row, true
//	... => VAR                  (at the end of a step) keep the first column of
//	                            the first row; later steps say $VAR
//	... !! SQLSTATE             (at the end of a step) the step must fail so
//
// $db is preset to the spec's database name (unique: e.g. for the global
// identifiers of prepared transactions).
// Steps run in file order; a session's statements use the simple protocol,
// so BEGIN, SET and several statements in one step work as in psql.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// specStep is one line of a spec.
type specStep struct {
	line       int
	label      string // session name, "setup", "check" or "await"
	background bool
	sql        string
	capture    string
	wantState  string
}

type spec struct {
	path      string
	invariant string
	steps     []specStep
	// twoPhase: a step prepares a transaction, which needs a server with
	// max_prepared_transactions > 0 (PostgreSQL's default is 0).
	twoPhase bool
}

var (
	specLabel   = regexp.MustCompile(`^([a-z][a-z0-9_]*)(&?):\s*(.*)$`)
	specCapture = regexp.MustCompile(`\s*=>\s*([a-z][a-z0-9_]*)\s*$`)
	specError   = regexp.MustCompile(`\s*!!\s*([0-9A-Z]{5})\s*$`)
	specVar     = regexp.MustCompile(`\$([a-z][a-z0-9_]*)`)
	specPrepare = regexp.MustCompile(`(?i)\bPREPARE\s+TRANSACTION\b`)
)

func parseSpec(path string) (*spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &spec{path: path}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "#"):
			if inv, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(trimmed, "#")), "invariant:"); ok {
				s.invariant = strings.TrimSpace(inv)
			}
			continue
		case line[0] == ' ' || line[0] == '\t':
			if len(s.steps) == 0 {
				return nil, fmt.Errorf("%s:%d: continuation line before any step", path, n)
			}
			s.steps[len(s.steps)-1].sql += "\n" + trimmed
			continue
		}
		m := specLabel.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: want 'session: SQL', got %q", path, n, line)
		}
		s.steps = append(s.steps, specStep{line: n, label: m[1], background: m[2] == "&", sql: m[3]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if s.invariant == "" {
		return nil, fmt.Errorf("%s: no '# invariant:' line", path)
	}
	for i := range s.steps {
		st := &s.steps[i]
		if m := specCapture.FindStringSubmatch(st.sql); m != nil {
			st.capture, st.sql = m[1], strings.TrimSpace(st.sql[:len(st.sql)-len(m[0])])
		}
		if m := specError.FindStringSubmatch(st.sql); m != nil {
			st.wantState, st.sql = m[1], strings.TrimSpace(st.sql[:len(st.sql)-len(m[0])])
		}
		if specPrepare.MatchString(st.sql) {
			s.twoPhase = true
		}
		if st.background && (st.label == "setup" || st.label == "check" || st.label == "await") {
			return nil, fmt.Errorf("%s:%d: %s cannot run in the background", path, st.line, st.label)
		}
	}
	return s, nil
}

// specT is what a spec run needs of its test (a fake one lets the runner's
// own test watch it fail).
type specT interface {
	require.TestingT
	Helper()
	Cleanup(func())
}

// specRun is the state of one running spec.
type specRun struct {
	t        specT
	ctx      context.Context
	url      string
	checker  *pgconn.PgConn
	sessions map[string]*pgconn.PgConn
	pending  map[string]chan specResult
	vars     map[string]string
	log      []string
}

type specResult struct {
	first string
	err   error
}

func (r *specRun) session(name string) *pgconn.PgConn {
	if c, ok := r.sessions[name]; ok {
		return c
	}
	c, err := pgconn.Connect(r.ctx, r.url+sep(r.url)+"application_name=spec_"+name)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = c.Close(context.Background()) })
	r.sessions[name] = c
	return c
}

func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

// specExec runs one step's SQL and returns the first column of the first row of
// the last result that had rows.
func specExec(ctx context.Context, c *pgconn.PgConn, sql string) specResult {
	results, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return specResult{err: err}
	}
	first := ""
	for _, res := range results {
		if res.Err != nil {
			return specResult{err: res.Err}
		}
		if len(res.Rows) > 0 && len(res.Rows[0]) > 0 {
			if res.Rows[0][0] == nil {
				first = "NULL"
			} else {
				first = string(res.Rows[0][0])
			}
		}
	}
	return specResult{first: first}
}

func (r *specRun) expand(sql string) string {
	return specVar.ReplaceAllStringFunc(sql, func(v string) string {
		val, ok := r.vars[v[1:]]
		require.True(r.t, ok, "variable %s is not set\n%s", v, r.trace())
		return val
	})
}

func (r *specRun) trace() string {
	return "steps so far:\n  " + strings.Join(r.log, "\n  ")
}

// settle checks a finished step against what it expects.
func (r *specRun) settle(st specStep, res specResult) {
	where := fmt.Sprintf("line %d (%s)", st.line, st.label)
	if st.wantState != "" {
		var pgErr *pgconn.PgError
		require.True(r.t, errors.As(res.err, &pgErr), "%s: want SQLSTATE %s, got %v\n%s", where, st.wantState, res.err, r.trace())
		require.Equal(r.t, st.wantState, pgErr.Code, "%s: %s\n%s", where, pgErr.Message, r.trace())
		r.log = append(r.log, fmt.Sprintf("%s -> error %s (expected)", where, pgErr.Code))
		return
	}
	require.NoError(r.t, res.err, "%s: %s\n%s", where, st.sql, r.trace())
	if st.capture != "" {
		r.vars[st.capture] = res.first
	}
	r.log = append(r.log, fmt.Sprintf("%s -> %s", where, res.first))
}

func (r *specRun) step(st specStep) {
	sql := r.expand(st.sql)
	stepCtx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	switch st.label {
	case "setup":
		r.settle(st, specExec(stepCtx, r.checker, sql))
	case "check":
		res := specExec(stepCtx, r.checker, sql)
		require.NoError(r.t, res.err, "line %d check: %s\n%s", st.line, sql, r.trace())
		require.Equal(r.t, "t", res.first, "line %d check failed: %s\n%s", st.line, sql, r.trace())
		r.log = append(r.log, fmt.Sprintf("line %d check ok", st.line))
	case "await":
		name := strings.TrimSpace(sql)
		ch, ok := r.pending[name]
		require.True(r.t, ok, "line %d: session %s has no background step\n%s", st.line, name, r.trace())
		delete(r.pending, name)
		select {
		case res := <-ch:
			r.settle(st, res)
		case <-stepCtx.Done():
			require.Fail(r.t, "background step did not finish", "line %d: %s\n%s", st.line, name, r.trace())
		}
	default:
		_, busy := r.pending[st.label]
		require.False(r.t, busy, "line %d: session %s still runs a background step\n%s", st.line, st.label, r.trace())
		c := r.session(st.label)
		if st.background {
			ch := make(chan specResult, 1)
			done := make(chan struct{})
			r.pending[st.label] = ch
			go func() { ch <- specExec(r.ctx, c, sql); close(done) }()
			r.log = append(r.log, fmt.Sprintf("line %d (%s) started in the background: %s", st.line, st.label,
				r.untilBlockedOrDone(c.PID(), done)))
			return
		}
		r.settle(st, specExec(stepCtx, c, sql))
	}
}

// untilBlockedOrDone waits (up to 10 s) until a background step has
// finished or its backend waits for a lock, as PostgreSQL's isolation tester
// does: the next step then runs against a session that is really blocked,
// not one that has not reached its statement yet.
func (r *specRun) untilBlockedOrDone(pid uint32, done <-chan struct{}) string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return "finished"
		default:
		}
		res := specExec(r.ctx, r.checker, fmt.Sprintf(
			"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %d AND wait_event_type = 'Lock')", pid))
		if res.err == nil && res.first == "t" {
			return "blocked"
		}
		time.Sleep(5 * time.Millisecond)
	}
	return "neither finished nor blocked after 10 s"
}

func TestSpecs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("specs", "*.spec"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sort.Strings(files)
	for _, path := range files {
		s, err := parseSpec(path)
		require.NoError(t, err)
		t.Run(strings.TrimSuffix(filepath.Base(path), ".spec"), func(t *testing.T) {
			t.Parallel()
			var b *bundle
			if s.twoPhase {
				if b = twoPhaseBundle(t); b == nil {
					return // said loudly why
				}
			} else {
				b = setup(t)
			}
			checker, err := pgconn.Connect(b.ctx, b.URL)
			require.NoError(t, err)
			t.Cleanup(func() {
				// A spec that failed between PREPARE and COMMIT PREPARED
				// must not keep its database from being dropped.
				_, _ = checker.Exec(context.Background(), `DO $$ DECLARE g text; BEGIN
					FOR g IN SELECT gid FROM pg_prepared_xacts WHERE database = current_database() LOOP
						EXECUTE format('ROLLBACK PREPARED %L', g);
					END LOOP; END $$`).ReadAll()
				_ = checker.Close(context.Background())
			})
			r := &specRun{t: t, ctx: b.ctx, url: b.URL, checker: checker,
				sessions: map[string]*pgconn.PgConn{}, pending: map[string]chan specResult{},
				vars: map[string]string{"db": b.DBName}}
			t.Logf("invariant: %s", s.invariant)
			for _, st := range s.steps {
				r.step(st)
			}
			require.Empty(t, r.pending, "background steps never awaited\n%s", r.trace())
		})
	}
}

// The runner itself: a check that is false fails, an expected error that
// does not come fails, and a capture feeds a later step.
func TestSpecRunnerCatchesFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	run := func(path string) bool {
		s, err := parseSpec(path)
		require.NoError(t, err)
		checker, err := pgconn.Connect(b.ctx, b.URL)
		require.NoError(t, err)
		defer checker.Close(context.Background())
		ft := &fakeT{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			r := &specRun{t: ft, ctx: b.ctx, url: b.URL, checker: checker,
				sessions: map[string]*pgconn.PgConn{}, pending: map[string]chan specResult{}, vars: map[string]string{}}
			for _, st := range s.steps {
				r.step(st)
			}
		}()
		<-done
		for _, fn := range ft.cleanups {
			fn()
		}
		return !ft.failed
	}
	_, err := parseSpec(write("none.spec", "a: SELECT 1\n"))
	require.Error(t, err, "a spec without an invariant is refused")
	require.True(t, run(write("good.spec", "# invariant: x\na: SELECT 41 + 1 => v\ncheck: SELECT $v = 42\nb: SELECT 1/0 !! 22012\n")))
	require.False(t, run(write("false.spec", "# invariant: x\ncheck: SELECT false\n")))
	require.False(t, run(write("noerr.spec", "# invariant: x\na: SELECT 1 !! 22012\n")))
}

// fakeT records failures instead of failing the test (FailNow ends the
// goroutine, as testing.T's does).
type fakeT struct {
	failed   bool
	cleanups []func()
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true; runtime.Goexit() }
func (f *fakeT) Helper()               {}
func (f *fakeT) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }

// docs/development.md quotes tests/specs/readme_example.spec; the quote must stay
// what TestSpecs runs.
func TestReadmeSpec(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile(filepath.Join("specs", "readme_example.spec"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "docs", "development.md"))
	require.NoError(t, err)
	body := string(spec)
	body = body[strings.Index(body, "# invariant:"):]
	require.Contains(t, string(readme), "```\n"+body+"```", "docs/development.md must quote tests/specs/readme_example.spec from its invariant line on")
}
