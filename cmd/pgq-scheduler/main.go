// Command pgq-scheduler is pgq's sidecar: it migrates the fanout schema,
// runs its maintenance on cron (one elected leader among any number of
// copies), serves Prometheus /metrics and /healthz, and prints status.
//
//	pgq-scheduler migrate --database-url URL
//	pgq-scheduler run     --database-url URL [--database-url URL2 ...] --listen 127.0.0.1:9187
//	pgq-scheduler status  --database-url URL
//	pgq-scheduler version
//	pgq-scheduler uninstall [--roles] --database-url URL
//
// Run `pgq-scheduler help` for every flag; each also reads from an
// environment variable and from the --config file.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq"
	"github.com/pgfanout/pgq/orchestrator"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"
// (make build, from the VERSION file); without it, versionString falls back
// to the module version of `go install ...@vX.Y.Z`, then to VERSION as
// embedded in package pgq (a `go install ./cmd/pgq-scheduler` from a checkout).
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgq-scheduler: "+strings.Join(strings.Fields(err.Error()), " "))
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError marks bad command lines (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is the whole program; main only adds signals and the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("missing command: migrate, run, status, uninstall or version (see: pgq-scheduler help)")}
	}
	cmd := args[0]
	switch cmd {
	case "help", "-h", "-help", "--help":
		printHelp(stdout)
		return nil
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "migrate", "run", "status", "uninstall":
	default:
		return usageError{fmt.Errorf("unknown command %q: want migrate, run, status, uninstall or version (see: pgq-scheduler help)", cmd)}
	}
	o, err := parseOptions(cmd, args[1:], getenv)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(stdout)
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	if o.databaseURL == "" {
		return usageError{fmt.Errorf("%s: no database: set --database-url or DATABASE_URL", cmd)}
	}
	if _, err := pgx.ParseConfig(o.databaseURL); err != nil {
		return usageError{fmt.Errorf("%s: invalid database URL: %w", cmd, err)}
	}
	logger, err := newLogger(o.logLevel, stderr)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", cmd, err)}
	}
	switch cmd {
	case "migrate":
		return runMigrate(ctx, o, stdout)
	case "status":
		return runStatus(ctx, o, stdout)
	case "uninstall":
		return runUninstall(ctx, o, stdout)
	default:
		return runScheduler(ctx, o, logger)
	}
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// connect opens one connection, waiting at most --connect-timeout.
func connect(ctx context.Context, cmd string, o *options) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(o.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid database URL: %w", cmd, err)
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > o.connectTimeout {
		cfg.ConnectTimeout = o.connectTimeout
	}
	setAppName(cfg.RuntimeParams)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: database unreachable: %w", cmd, err)
	}
	return conn, nil
}

func setAppName(p map[string]string) {
	if p["application_name"] == "" {
		p["application_name"] = "pgq-scheduler"
	}
}

func runMigrate(ctx context.Context, o *options, stdout io.Writer) error {
	conn, err := connect(ctx, "migrate", o)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := orchestrator.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pgq-scheduler: schema at version %d\n", v)
	return nil
}

func runUninstall(ctx context.Context, o *options, stdout io.Writer) error {
	conn, err := connect(ctx, "uninstall", o)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := orchestrator.Uninstall(ctx, conn, o.dropRoles); err != nil {
		return err
	}
	msg := "pgq-scheduler: removed schemas fanout and fanout_data and " + orchestrator.VersionTable
	if o.dropRoles {
		msg += ", and the roles fanout_admin, fanout_producer and fanout_consumer"
	}
	fmt.Fprintln(stdout, msg)
	return nil
}

func runStatus(ctx context.Context, o *options, stdout io.Writer) error {
	conn, err := connect(ctx, "status", o)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := orchestrator.ReadStats(ctx, connDB{conn}, orchestrator.DefaultLeaderName)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if st.Maintenance, err = orchestrator.MaintenanceFuncs(ctx, connDB{conn}, orchestrator.SchedulerConfig{}); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return orchestrator.WriteStatus(stdout, st)
}

func runScheduler(ctx context.Context, o *options, logger *slog.Logger) error {
	timeouts, err := o.timeouts.durations()
	if err != nil {
		return usageError{fmt.Errorf("run: %w", err)}
	}
	if err := o.checkRunNumbers(); err != nil {
		return usageError{err}
	}
	switch {
	case o.leaderTTL < time.Second || o.leaderTTL > time.Hour:
		return usageError{fmt.Errorf("run: --leader-ttl %s: want between 1s and 1h", o.leaderTTL)}
	case o.batchLimit < 1:
		return usageError{fmt.Errorf("run: --batch-limit %d: want at least 1", o.batchLimit)}
	case o.consoleAdmin && (!o.console || o.consoleToken == ""):
		return usageError{errors.New("run: --console-admin needs --console and a --console-token (or PGQ_CONSOLE_TOKEN)")}
	case o.jitter < 0 || o.jobTimeout <= 0 || o.shutdownTimeout <= 0 || o.backfillTargetLatency <= 0:
		return usageError{errors.New("run: --jitter must be >= 0; --job-timeout, --shutdown-timeout and --backfill-target-latency > 0")}
	}
	jitter := o.jitter
	if jitter == 0 {
		jitter = -1 // SchedulerConfig: negative disables
	}

	scfg := orchestrator.SchedulerConfig{
		Logger:           logger,
		LeaderID:         o.leaderID,
		LeaderName:       o.leaderName,
		LeaderTTL:        o.leaderTTL,
		ShutdownTimeout:  o.shutdownTimeout,
		DiscoverSchedule: o.discoverSchedule,
		DefaultSchedule:  o.defaultSchedule,
		Schedules:        o.schedules,
		JobTimeout:       o.jobTimeout,
		Timeouts:         timeouts,
		BatchLimit:       o.batchLimit,
		Jitter:           jitter,
		BackfillMatch:    o.backfillMatch,
		Backfill: orchestrator.BackfillConfig{
			TargetLatency: o.backfillTargetLatency,
			MaxRate:       o.backfillMaxRate,
		},
	}
	if err := scfg.Validate(); err != nil {
		return usageError{fmt.Errorf("run: %w", err)}
	}

	urls := o.databaseURLs
	if len(urls) == 0 {
		urls = []string{o.databaseURL}
	}
	if o.discoverDatabases != "" {
		re, err := regexp.Compile(o.discoverDatabases)
		if err != nil {
			return usageError{fmt.Errorf("run: --discover-databases %q: %w", o.discoverDatabases, err)}
		}
		found, err := discoverDatabases(ctx, o, re, logger)
		if err != nil {
			return fmt.Errorf("run: --discover-databases: %w", err)
		}
		// The first URL names the server; further ones are served as well.
		urls = append(found, urls[1:]...)
		if len(urls) == 0 {
			return fmt.Errorf("run: --discover-databases %q: no database of the server matches and has pgq installed", o.discoverDatabases)
		}
	}
	names, err := siteNames(urls)
	if err != nil {
		return usageError{fmt.Errorf("run: %w", err)}
	}
	multi := len(urls) > 1 || o.discoverDatabases != ""
	if o.consoleSample < time.Second || o.consoleSample > time.Hour {
		return usageError{fmt.Errorf("run: --console-sample-interval %s: want between 1s and 1h", o.consoleSample)}
	}
	consoleCfg := orchestrator.ConsoleConfig{
		Admin: o.consoleAdmin, Token: o.consoleToken, SampleInterval: o.consoleSample,
		ListenAddr: o.listen, // beyond loopback: dead-letter payloads only with the token
	}
	if multi {
		// One CSRF key for every database's console: they share the cookie.
		consoleCfg.CSRFKey = make([]byte, 32)
		if _, err := rand.Read(consoleCfg.CSRFKey); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	sites := make([]orchestrator.Site, 0, len(urls))
	for i, u := range urls {
		log := logger
		if multi {
			log = logger.With("database", names[i])
			log.Info("serving database", "database_index", i)
		}
		site, closePool, err := openSite(ctx, o, u, names[i], scfg, consoleCfg, log, multi)
		if closePool != nil {
			defer closePool()
		}
		if err != nil {
			if multi {
				return fmt.Errorf("database %s: %w", names[i], err)
			}
			return err
		}
		sites = append(sites, site)
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()

	var srv *http.Server
	srvErr := make(chan error, 1)
	if o.listen != "" {
		var h http.Handler
		if multi {
			h = orchestrator.MultiHandler(sites, nil)
		} else {
			h = sites[0].Sched.Handler()
			if sites[0].Console != nil {
				h = sites[0].Console.Handler(h)
			}
		}
		for _, site := range sites {
			if site.Console != nil {
				go site.Console.Run(runCtx)
			}
		}
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return fmt.Errorf("run: listen: %w", err)
		}
		srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { srvErr <- srv.Serve(ln) }()
		logger.Info("serving /metrics and /healthz", "addr", ln.Addr().String(),
			"metrics", "http://"+ln.Addr().String()+"/metrics")
		if o.console {
			logger.Info("serving the console", "url", "http://"+ln.Addr().String()+"/", "admin", o.consoleAdmin)
		}
	}
	// Every database's scheduler runs (its own leader election and jobs);
	// the first to fail stops them all.
	runErr := make(chan error, len(sites))
	for _, site := range sites {
		go func() {
			err := site.Sched.Run(runCtx)
			if err != nil && multi {
				err = fmt.Errorf("database %s: %w", site.Name, err)
			}
			stopRun()
			runErr <- err
		}()
	}
	wait := func() error {
		var first error
		for range sites {
			if err := <-runErr; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	select {
	case err = <-runErr:
		stopRun()
		for range sites[1:] {
			if e := <-runErr; e != nil && err == nil {
				err = e
			}
		}
	case err = <-srvErr:
		err = fmt.Errorf("run: http server: %w", err)
		stopRun()
		_ = wait()
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	return err
}

// discoverDatabases lists the databases of the server of --database-url
// (once, at start) whose names match re and that have pgq installed, and
// returns their URLs: the first URL with another database.
func discoverDatabases(ctx context.Context, o *options, re *regexp.Regexp, logger *slog.Logger) ([]string, error) {
	conn, err := connect(ctx, "run", o)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname`)
	var all []string
	if err == nil {
		all, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	var out []string
	for _, name := range all {
		if !re.MatchString(name) {
			continue
		}
		u, err := withDatabase(o.databaseURL, name)
		if err != nil {
			return nil, err
		}
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
		c, err := pgx.ConnectConfig(cctx, cfg)
		var installed bool
		if err == nil {
			err = c.QueryRow(cctx, `SELECT to_regproc('fanout.maint_operations') IS NOT NULL`).Scan(&installed)
			c.Close(ctx)
		}
		cancel()
		switch {
		case err != nil:
			logger.Warn("discovered database not reachable: skipped", "database", name, "error", err)
		case !installed:
			logger.Info("discovered database without pgq: skipped", "database", name)
		default:
			logger.Info("discovered database", "database", name)
			out = append(out, u)
		}
	}
	return out, nil
}

// withDatabase returns connection string u naming database name instead.
func withDatabase(u, name string) (string, error) {
	if parsed, err := url.Parse(u); err == nil && (parsed.Scheme == "postgres" || parsed.Scheme == "postgresql") {
		parsed.Path = "/" + name
		parsed.RawPath = ""
		return parsed.String(), nil
	}
	// key=value form: a later dbname wins.
	return u + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'", nil
}

// siteNames names each database of `run` by its database name, or by
// database@host:port where two URLs name databases of the same name.
func siteNames(urls []string) ([]string, error) {
	names := make([]string, len(urls))
	count := map[string]int{}
	cfgs := make([]*pgx.ConnConfig, len(urls))
	for i, u := range urls {
		c, err := pgx.ParseConfig(u)
		if err != nil {
			return nil, fmt.Errorf("invalid database URL #%d: %w", i+1, err)
		}
		cfgs[i] = c
		count[c.Database]++
	}
	for i, c := range cfgs {
		names[i] = c.Database
		if count[c.Database] > 1 {
			names[i] = fmt.Sprintf("%s@%s:%d", c.Database, c.Host, c.Port)
		}
	}
	if err := orchestrator.CheckSiteNames(names); err != nil {
		return nil, err
	}
	return names, nil
}

// openSite connects to one database of `run` (waiting for it up to
// --connect-timeout), migrates it with --migrate, and builds its scheduler
// and (with --console) its console. The returned func closes its pool.
func openSite(ctx context.Context, o *options, dbURL, name string, scfg orchestrator.SchedulerConfig,
	ccfg orchestrator.ConsoleConfig, logger *slog.Logger, multi bool) (orchestrator.Site, func(), error) {
	site := orchestrator.Site{Name: name}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return site, nil, usageError{fmt.Errorf("run: invalid database URL: %w", err)}
	}
	pcfg.MaxConns = int32(o.maxConns)
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pcfg.HealthCheckPeriod = 10 * time.Second
	setAppName(pcfg.ConnConfig.RuntimeParams)
	orchestrator.WatchPreparedStatements(pcfg.ConnConfig, logger)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return site, nil, fmt.Errorf("run: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	err = pingWithRetry(pctx, pool)
	cancel()
	if err != nil {
		return site, pool.Close, fmt.Errorf("run: database unreachable: %w", err)
	}
	if o.migrate {
		v, err := orchestrator.MigrateURL(ctx, dbURL)
		if err != nil {
			return site, pool.Close, fmt.Errorf("run: %w", err)
		}
		logger.Info("schema migrated", "version", v)
	}
	var installed bool
	if err := pool.QueryRow(ctx, `SELECT to_regproc('fanout.maint_operations') IS NOT NULL`).Scan(&installed); err != nil {
		return site, pool.Close, fmt.Errorf("run: %w", err)
	}
	if !installed {
		return site, pool.Close, fmt.Errorf("run: %w, or pass --migrate", orchestrator.ErrNotInstalled)
	}
	scfg.Logger = logger
	s, err := orchestrator.NewScheduler(pool, scfg)
	if err != nil {
		return site, pool.Close, usageError{fmt.Errorf("run: %w", err)}
	}
	site.Sched = s
	if o.listen != "" && o.console {
		ccfg.Logger = logger
		if multi {
			ccfg.Database = name
		}
		c, err := orchestrator.NewConsole(pool, s, ccfg)
		if err != nil {
			return site, pool.Close, usageError{fmt.Errorf("run: %w", err)}
		}
		site.Console = c
	}
	return site, pool.Close, nil
}

// pingWithRetry pings until it works or ctx ends (a database that is still
// starting up is waited for).
func pingWithRetry(ctx context.Context, pool *pgxpool.Pool) error {
	wait := 100 * time.Millisecond
	for {
		err := pool.Ping(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// connDB adapts a single *pgx.Conn to orchestrator.DB.
type connDB struct{ *pgx.Conn }

func (c connDB) Ping(ctx context.Context) error { return c.Conn.Ping(ctx) }

var migrationFile = regexp.MustCompile(`^\d+_.*\.sql$`)

func versionString() string {
	return fmt.Sprintf("pgq-scheduler %s (%s, schema version %d, SQL %s)",
		binaryVersion(), runtime.Version(), schemaVersion(), pgq.Version())
}

// binaryVersion is the version stamped at build time, else the module
// version the binary was installed at, else the checkout's VERSION with the
// VCS revision when the build recorded one.
func binaryVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	v := "v" + pgq.Version()
	if ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			v += "+" + rev + dirty
		}
	}
	return v
}

// schemaVersion is the number of embedded migrations: the schema version
// (public.fanout_schema_version) that `migrate` brings a database to.
func schemaVersion() int {
	n := 0
	entries, _ := fs.ReadDir(pgq.Migrations(), ".")
	for _, e := range entries {
		if !e.IsDir() && migrationFile.MatchString(e.Name()) {
			n++
		}
	}
	return n
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `pgq-scheduler: pgq's sidecar (migrations, maintenance on cron, metrics, status)

Usage:
  pgq-scheduler migrate [flags]   apply the embedded migrations
  pgq-scheduler run     [flags]   run maintenance (one leader among all copies), serve the console, /metrics and /healthz;
                                  --database-url repeated: one sidecar for several databases, each with its own leader
  pgq-scheduler status  [flags]   print topics, groups, lag, dead groups and backfills
  pgq-scheduler uninstall [flags] remove pgq from the database (schemas fanout and fanout_data, the
                                  version table; --roles: the three roles too); nothing else is touched
  pgq-scheduler version           print the binary's version and the schema and SQL versions it installs

Every flag can also be set by an environment variable (DATABASE_URL, or PGQ_
and the flag name in upper case with '-' as '_', e.g. PGQ_LEADER_TTL=30s) or
in the --config file (key = value lines, keys named like the flags; repeat
schedule.FUNC = SPEC and timeout.FUNC = DURATION per function). Flags win over
the environment, which wins over the file.

`)
	for _, cmd := range []string{"migrate", "uninstall", "run"} {
		title := "Flags of migrate, status, uninstall and run:"
		switch cmd {
		case "uninstall":
			title = "Flags of uninstall only:"
		case "run":
			title = "Flags of run only:"
		}
		fmt.Fprintln(w, title)
		common := map[string]bool{}
		newFlagSet("migrate", &options{}).VisitAll(func(f *flag.Flag) { common[f.Name] = true })
		newFlagSet(cmd, &options{}).VisitAll(func(f *flag.Flag) {
			if cmd != "migrate" && common[f.Name] {
				return
			}
			def := ""
			if f.DefValue != "" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(w, "  --%-26s %s%s [%s]\n", f.Name, f.Usage, def, envName(f.Name))
		})
		fmt.Fprintln(w)
	}
}
