package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pgfanout/pgq/orchestrator"
)

// options are the settings of every subcommand. Each comes from, in order
// of precedence: a command-line flag, an environment variable (DATABASE_URL,
// or PGQ_ + the flag name in upper case with '-' as '_'), the config file
// (--config / PGQ_CONFIG; key = value lines named like the flags), the
// default.
type options struct {
	databaseURL    string   // the first of databaseURLs
	databaseURLs   listFlag // run: one sidecar for several databases
	configFile     string
	logLevel       string
	connectTimeout time.Duration

	// uninstall only
	dropRoles bool

	// run only
	listen                string
	migrate               bool
	maxConns              int
	leaderID              string
	leaderName            string
	leaderTTL             time.Duration
	shutdownTimeout       time.Duration
	discoverSchedule      string
	defaultSchedule       string
	schedules             mapFlag
	jobTimeout            time.Duration
	timeouts              mapFlag
	batchLimit            int
	jitter                time.Duration
	backfillTargetLatency time.Duration
	backfillMaxRate       float64
	backfillMatch         string
	console               bool
	consoleAdmin          bool
	consoleToken          string
	consoleSample         time.Duration
	discoverDatabases     string
}

// newFlagSet defines the flags of subcommand cmd.
func newFlagSet(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.Var(&o.databaseURLs, "database-url", "PostgreSQL connection string (run: repeatable, one sidecar for several databases)")
	fs.StringVar(&o.configFile, "config", "", "config file of key = value lines named like these flags")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (JSON logs on stderr)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "how long to wait for the database at startup")
	if cmd == "uninstall" {
		fs.BoolVar(&o.dropRoles, "roles", false, "also drop the roles fanout_admin, fanout_producer and fanout_consumer (cluster-wide)")
	}
	if cmd != "run" {
		return fs
	}
	o.schedules = mapFlag{}
	o.timeouts = mapFlag{}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9187", "address of the console, /metrics and /healthz (default loopback only; :9187 for every interface; empty: no HTTP server)")
	fs.BoolVar(&o.migrate, "migrate", false, "apply the embedded migrations before starting")
	fs.IntVar(&o.maxConns, "max-conns", 4, "connection pool size of the jobs, 2..10000 (the leader election has a connection of its own)")
	fs.StringVar(&o.leaderID, "leader-id", "", "this sidecar's id in fanout.leader (default host-pid-random)")
	fs.StringVar(&o.leaderName, "leader-name", orchestrator.DefaultLeaderName, "elected role; sidecars with different names run independently")
	fs.DurationVar(&o.leaderTTL, "leader-ttl", orchestrator.DefaultLeaderTTL, "leader lease; renewed every ttl/3, a standby takes over within it")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", orchestrator.DefaultShutdownTimeout, "on SIGTERM, how long to wait for running jobs")
	fs.StringVar(&o.discoverSchedule, "discover-schedule", orchestrator.DefaultDiscoverSchedule, "how often fanout.maint_operations() is asked for new functions")
	fs.StringVar(&o.defaultSchedule, "default-schedule", "", "schedule of every function without --schedule (default: backfill 5s, cleanup 30s, others 10s)")
	fs.Var(&o.schedules, "schedule", "FUNC=SPEC: cron schedule of one maintenance function (repeatable)")
	fs.DurationVar(&o.jobTimeout, "job-timeout", orchestrator.DefaultJobTimeout, "per-run timeout and statement_timeout of each job")
	fs.Var(&o.timeouts, "timeout", "FUNC=DURATION: timeout of one maintenance function (repeatable)")
	fs.IntVar(&o.batchLimit, "batch-limit", orchestrator.DefaultBatchLimit, "calls per run of a function that keeps returning > 0")
	fs.DurationVar(&o.jitter, "jitter", orchestrator.DefaultJitter, "largest random delay before a run (0: none)")
	fs.DurationVar(&o.backfillTargetLatency, "backfill-target-latency", orchestrator.DefaultBackfillTargetLatency, "backfill slows down when the p95 step latency exceeds this")
	fs.Float64Var(&o.backfillMaxRate, "backfill-max-rate", orchestrator.DefaultBackfillMaxRate, "most backfill steps per second")
	fs.StringVar(&o.backfillMatch, "backfill-match", orchestrator.DefaultBackfillMatch, "regular expression: matching functions are backfill steps, run through the adaptive driver")
	fs.BoolVar(&o.console, "console", true, "serve the operator console (status page at /, JSON API at /api/) on --listen")
	fs.BoolVar(&o.consoleAdmin, "console-admin", false, "enable the console's admin actions (resurrect, replay dead letters, cancel backfill); needs --console-token")
	fs.StringVar(&o.consoleToken, "console-token", "", "secret the console's admin actions must present (Authorization: Bearer); also shows a message's payload and headers")
	fs.StringVar(&o.discoverDatabases, "discover-databases", "", "regular expression: serve every database of the --database-url's server whose name matches and that has pgq installed (found at start)")
	fs.DurationVar(&o.consoleSample, "console-sample-interval", orchestrator.DefaultConsoleSampleInterval, "how often the console samples lag and throughput (its sparklines and rates), 1s..1h")
	return fs
}

// allKeys are the settings any subcommand knows: a config file shared by
// `run` and `status` may hold them all.
func allKeys() map[string]bool {
	keys := map[string]bool{}
	newFlagSet("run", &options{}).VisitAll(func(f *flag.Flag) { keys[f.Name] = true })
	newFlagSet("uninstall", &options{}).VisitAll(func(f *flag.Flag) { keys[f.Name] = true })
	return keys
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	if flagName == "database-url" {
		return "DATABASE_URL"
	}
	return "PGQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseOptions parses args of subcommand cmd and layers env and config file
// under the flags.
func parseOptions(cmd string, args []string, getenv func(string) string) (*options, error) {
	o := &options{}
	fs := newFlagSet(cmd, o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w (see: pgq-scheduler help)", cmd, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected argument %q (see: pgq-scheduler help)", cmd, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if !set["config"] {
		o.configFile = getenv("PGQ_CONFIG")
	}
	file := map[string]string{}
	if o.configFile != "" {
		var err error
		if file, err = readConfigFile(o.configFile); err != nil {
			return nil, err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || f.Name == "config" {
			return
		}
		apply := func(src, val string) {
			if err != nil {
				return
			}
			if m, ok := f.Value.(*mapFlag); ok {
				err = m.merge(val) // flags first: keys already set win
			} else if !set[f.Name] {
				err = fs.Set(f.Name, val)
				set[f.Name] = true
			}
			if err != nil {
				err = fmt.Errorf("%s: %s: invalid value %q for %s: %w", cmd, src, val, f.Name, err)
			}
		}
		if v := getenv(envName(f.Name)); v != "" {
			apply("env "+envName(f.Name), v)
		}
		if v, ok := file[f.Name]; ok {
			apply("config "+o.configFile, v)
		}
	})
	if len(o.databaseURLs) > 0 {
		o.databaseURL = o.databaseURLs[0]
	}
	if err == nil && cmd != "run" && len(o.databaseURLs) > 1 {
		err = fmt.Errorf("%s: one --database-url at a time (only run serves several databases)", cmd)
	}
	return o, err
}

// readConfigFile reads key = value lines; '#' starts a comment line; values
// may be double-quoted; schedule.FUNC = SPEC and timeout.FUNC = DURATION set
// one entry of the per-function maps.
func readConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	known := allKeys()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("config %s:%d: want key = value, got %q", path, n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		for _, mk := range []string{"schedule", "timeout"} {
			if fn, ok := strings.CutPrefix(k, mk+"."); ok && fn != "" {
				k, v = mk, joinEntries(out[mk], fn+"="+v)
			}
		}
		if !known[k] || k == "config" {
			return nil, fmt.Errorf("config %s:%d: unknown setting %q", path, n, k)
		}
		if k == "database-url" && out[k] != "" {
			v = out[k] + "\n" + v // several databases: one line each
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return out, nil
}

func joinEntries(a, b string) string {
	if a == "" {
		return b
	}
	return a + ";" + b
}

// listFlag is a repeatable flag; a value from the config file holds one
// entry per line.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }

func (l *listFlag) Set(v string) error {
	for _, e := range strings.Split(v, "\n") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}

// mapFlag is a repeatable FUNC=VALUE flag; one value may hold several
// entries separated by ';' (the form of env vars and config files).
type mapFlag map[string]string

func (m mapFlag) String() string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ";")
}

func (m mapFlag) Set(v string) error { return m.put(v, true) }

// merge adds entries whose keys are not set yet.
func (m mapFlag) merge(v string) error { return m.put(v, false) }

func (m mapFlag) put(v string, overwrite bool) error {
	for _, e := range strings.Split(v, ";") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		k, val, ok := strings.Cut(e, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok || k == "" || val == "" {
			return fmt.Errorf("want FUNC=VALUE, got %q", e)
		}
		if _, exists := m[k]; exists && !overwrite {
			continue
		}
		m[k] = val
	}
	return nil
}

// durations parses the values of a FUNC=DURATION map.
func (m mapFlag) durations() (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(m))
	for k, v := range m {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("timeout %s=%s: want a positive duration such as 30s", k, v)
		}
		out[k] = d
	}
	return out, nil
}

// maxMaxConns bounds --max-conns (PostgreSQL's max_connections is at most
// 262143; a pool size also has to fit pgxpool's int32).
const maxMaxConns = 10000

// checkRunNumbers rejects numeric settings of `run` that parse but make no
// sense: a NaN or infinite --backfill-max-rate (NaN passed "> 0" checks and
// left backfills unthrottled) and a --max-conns outside 2..maxMaxConns
// (4294967298 wrapped to 2 in the pool's int32).
func (o *options) checkRunNumbers() error {
	switch {
	case math.IsNaN(o.backfillMaxRate) || math.IsInf(o.backfillMaxRate, 0) || o.backfillMaxRate <= 0:
		return fmt.Errorf("run: --backfill-max-rate %g: want a finite number > 0", o.backfillMaxRate)
	case o.maxConns < 2 || o.maxConns > maxMaxConns:
		return fmt.Errorf("run: --max-conns %d: want between 2 and %d", o.maxConns, maxMaxConns)
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
