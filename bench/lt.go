package main

// The pre-GA matrix at the seed's own rates (make bench-lt, -only lt): for
// each LT row, the highest publish rate pgq sustains on this machine with
// every seed threshold holding, found by stepping the rate (doubling, then
// bisecting) and confirmed over a longer window sampled like the seed's run.
// The seed's gate is each row at 10,000 msg/s (LT-7: 30,000) for an hour;
// this run makes the distance to it measurable in under an hour on the
// machine at hand. It is not part of make bench (Optional).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

func init() { register(200, ltScenario{}) }

type ltScenario struct{}

func (ltScenario) Name() string   { return "lt" }
func (ltScenario) Optional() bool { return true }
func (ltScenario) Title() string {
	return "LT matrix at the seed's rates: the highest sustained publish rate per row (reference 4/8/16/32, offset 16/64/100 groups)"
}

// ltSeedRate is the rate the seed's pre-GA gate runs each row at.
func ltSeedRate(r matrixRow) float64 {
	if r.id == "LT-7" {
		return 30000
	}
	return 10000
}

// ltConfig is the run's shape; every field can be set by an LT_* variable
// (docs/lt-matrix.md).
type ltConfig struct {
	Rows      []matrixRow
	Step      time.Duration // measured part of one search step
	Ramp      time.Duration // before each window: the new rate runs unmeasured
	Confirm   time.Duration // the confirming window at the found rate
	Sample    time.Duration // sampling interval inside the confirming window
	Warmup    time.Duration // per row, at 10 % of the first step's rate
	Start     float64       // first step's rate, msg/s
	MaxSteps  int
	Producers int           // producer connections (application threads doing business writes)
	Batch     int           // messages per business transaction (1: one per write)
	Page      int           // consumer page size
	Linger    time.Duration // the consumers' client.Config.Linger
	OneCore   string
}

func ltConfigFromEnv(quick bool) (ltConfig, error) {
	c := ltConfig{Step: 25 * time.Second, Ramp: 5 * time.Second, Confirm: 180 * time.Second, Sample: 60 * time.Second,
		Warmup: 15 * time.Second, Start: 1000, MaxSteps: 6, Producers: 16, Batch: 1, Page: 100, OneCore: "LT-7"}
	if quick {
		c.Step, c.Ramp, c.Confirm, c.Sample, c.Warmup, c.MaxSteps = 6*time.Second, 2*time.Second, 20*time.Second,
			10*time.Second, 3*time.Second, 3
	}
	c.Rows = matrixRows
	var errs []error
	dur := func(name string, p *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s=%q: want a positive duration", name, v))
				return
			}
			*p = d
		}
	}
	num := func(name string, p *int, lo int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo {
				errs = append(errs, fmt.Errorf("%s=%q: want an integer ≥ %d", name, v, lo))
				return
			}
			*p = n
		}
	}
	dur("LT_STEP", &c.Step)
	dur("LT_RAMP", &c.Ramp)
	dur("LT_CONFIRM", &c.Confirm)
	dur("LT_SAMPLE", &c.Sample)
	dur("LT_WARMUP", &c.Warmup)
	if v := os.Getenv("LT_LINGER"); v != "" {
		if d, err := time.ParseDuration(v); err != nil || d < 0 || d >= time.Second {
			errs = append(errs, fmt.Errorf("LT_LINGER=%q: want a duration from 0 to below 1s (the consumers' PollInterval)", v))
		} else {
			c.Linger = d
		}
	}
	num("LT_MAX_STEPS", &c.MaxSteps, 1)
	num("LT_PRODUCERS", &c.Producers, 1)
	num("LT_BATCH", &c.Batch, 1)
	num("LT_PAGE", &c.Page, 1)
	if v := os.Getenv("LT_START"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			errs = append(errs, fmt.Errorf("LT_START=%q: want a positive rate", v))
		} else {
			c.Start = f
		}
	}
	if v, ok := os.LookupEnv("LT_ONE_CORE"); ok {
		c.OneCore = v
	}
	if v := os.Getenv("LT_ROWS"); v != "" {
		c.Rows = nil
		for _, id := range strings.Split(v, ",") {
			found := false
			for _, r := range matrixRows {
				if r.id == strings.TrimSpace(id) {
					c.Rows, found = append(c.Rows, r), true
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("LT_ROWS: unknown row %q", id))
			}
		}
	}
	return c, errors.Join(errs...)
}

func (ltScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	cfg, err := ltConfigFromEnv(env.Quick)
	if err != nil {
		return nil, err
	}
	disk, err := measureDiskWrite(ctx, env)
	if err != nil {
		env.Logf("disk write rate not measured (%v): the WAL threshold is not judged", err)
	}
	env.Logf("disk sequential write (direct I/O): %s", disk)
	sidecar := filepath.Join(repoRoot(), "bin", "pgq-scheduler")
	if _, err := os.Stat(sidecar); err != nil {
		return nil, fmt.Errorf("maintenance runs in the sidecar: build it first (make build): %w", err)
	}
	env.Baseline("seed rate", "the seed's pre-GA gate: each LT row at 10,000 msg/s (LT-7: 30,000 msg/s into 100 offset groups) "+
		"for an hour after a 5-minute warm-up at 10 % and a 5-minute ramp, sampled every 60 s, with bloat < 20 %, "+
		"WAL < 50 % of the disk's capacity, cleanup faster than production and consumer fetch p95 < 10 ms")
	var out []Result
	var oneCore *ltRowResult
	var twoCore *ltRowResult
	for _, row := range cfg.Rows {
		res, err := runLTRow(ctx, env, cfg, row, disk, sidecar, "")
		if err != nil {
			return out, fmt.Errorf("%s: %w", row.id, err)
		}
		out = append(out, res.result(cfg, disk))
		if row.id == cfg.OneCore {
			twoCore = &res
			one, err := runLTRow(ctx, env, cfg, row, disk, sidecar, "0")
			if err != nil {
				env.Logf("%s on one core not measured: %v", row.id, err)
				continue
			}
			oneCore = &one
		}
	}
	if oneCore != nil && twoCore != nil {
		out = append(out, ltProjection(*oneCore, *twoCore))
	}
	return out, nil
}

// diskRate is the disk's sequential write rate as measured by dd.
type diskRate struct {
	MBps float64
	Path string
}

func (d diskRate) String() string {
	if d.MBps == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.0f MB/s (dd oflag=direct, 256 × 1 MiB, beside %s)", d.MBps, d.Path)
}

var ddRate = regexp.MustCompile(`copied, ([0-9.]+) s`)

// measureDiskWrite writes 256 MiB with O_DIRECT beside the server's data
// directory (the disk its WAL goes to) and reads dd's own timing.
func measureDiskWrite(ctx context.Context, env *Env) (diskRate, error) {
	var dataDir string
	conn, err := pgx.Connect(ctx, env.AdminURL)
	if err != nil {
		return diskRate{}, err
	}
	err = conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir)
	conn.Close(ctx)
	dir := filepath.Dir(dataDir)
	if err != nil || !isDir(dir) {
		dir = os.TempDir() // a remote server: this machine's disk says little
	}
	f := filepath.Join(dir, fmt.Sprintf("pgq-bench-lt-dd-%d.tmp", os.Getpid()))
	defer os.Remove(f)
	const mib = 256
	cmd := exec.CommandContext(ctx, "dd", "if=/dev/zero", "of="+f, "bs=1M", fmt.Sprintf("count=%d", mib), "oflag=direct", "conv=fsync")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return diskRate{}, fmt.Errorf("dd: %w: %s", err, strings.TrimSpace(string(b)))
	}
	m := ddRate.FindSubmatch(b)
	if m == nil {
		return diskRate{}, fmt.Errorf("dd: no timing in %q", b)
	}
	s, _ := strconv.ParseFloat(string(m[1]), 64)
	if s <= 0 {
		return diskRate{}, fmt.Errorf("dd: %q", b)
	}
	return diskRate{MBps: mib * 1.048576 / s, Path: dir}, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// ltRig is one row's running system: a fresh database, the topic and its
// groups, one shipped-client consumer per group, the producers and a sidecar.
type ltRig struct {
	env       *Env
	cfg       ltConfig
	row       matrixRow
	db        *DB
	topic     string
	consumers *pgxpool.Pool
	fetch     fetchRecorder
	delivered atomic.Int64
	prod      *ltProducer
	pgss      bool
	stop      func()
	done      chan struct{}
	sidecar   *exec.Cmd
	errc      chan error
}

// fetchRecorder is a pgx tracer on the consumers' pool: it times every
// fanout.read statement the shipped client sends (rows read to the end).
type fetchRecorder struct {
	mu      sync.Mutex
	samples []time.Duration
}

type fetchStartKey struct{}

func (f *fetchRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "fanout.read(") {
		return context.WithValue(ctx, fetchStartKey{}, time.Now())
	}
	return ctx
}

func (f *fetchRecorder) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	t0, ok := ctx.Value(fetchStartKey{}).(time.Time)
	if !ok || d.Err != nil {
		return
	}
	f.mu.Lock()
	f.samples = append(f.samples, time.Since(t0))
	f.mu.Unlock()
}

// take returns the samples since the last take and starts anew.
func (f *fetchRecorder) take() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.samples
	f.samples = nil
	return s
}

func newLTRig(ctx context.Context, env *Env, cfg ltConfig, row matrixRow, sidecar string) (*ltRig, error) {
	db, err := env.NewDB(ctx, "lt", int32(cfg.Producers+8))
	if err != nil {
		return nil, err
	}
	r := &ltRig{env: env, cfg: cfg, row: row, db: db, topic: "lt." + row.completion, done: make(chan struct{}),
		errc: make(chan error, row.groups+2)}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if err := setupBloatBytes(ctx, db.Pool); err != nil {
		return nil, fmt.Errorf("pgstattuple: %w", err)
	}
	_, err = db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	if err == nil {
		_, err = db.Pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	}
	r.pgss = err == nil
	if !r.pgss {
		env.Logf("%s: pg_stat_statements unavailable (%v): the server-side fetch figures are not measured "+
			"(make bench-lt starts its server with shared_preload_libraries=pg_stat_statements)", row.id, err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE lt_orders (id bigserial PRIMARY KEY, customer int NOT NULL,
		total numeric(12,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("business table: %w", err)
	}
	// Rotation and retention of a minute each, so that cleanup is judged
	// several times inside one confirming window (the defaults are an hour
	// and a day).
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub', completion => $2,
		retention => '1 minute', partition_interval => '1 minute', zero_subscription_retention => '1 minute')`,
		r.topic, row.completion); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	groups := make([]string, row.groups)
	for g := range groups {
		groups[g] = fmt.Sprintf("g%03d", g)
		if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, start_position => 'latest')`,
			r.topic, groups[g]); err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", groups[g], err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(min(row.groups, 48) + 2)
	pcfg.ConnConfig.Tracer = &r.fetch
	if r.consumers, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	r.sidecar = exec.Command(sidecar, "run", "--database-url", db.URL, "--listen", "", "--log-level", "warn")
	r.sidecar.Stdout, r.sidecar.Stderr = os.Stderr, os.Stderr
	if err := r.sidecar.Start(); err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, g := range groups {
		c, err := client.NewConsumer(r.consumers, client.Config{Topic: r.topic, Group: g, Consumer: g + "-m0",
			MaxMessages: cfg.Page, Linger: cfg.Linger, ListenCheckTimeout: -1, Logger: quietLog},
			func(context.Context, *client.Delivery) error { r.delivered.Add(1); return nil })
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(cctx); err != nil && cctx.Err() == nil {
				r.errc <- fmt.Errorf("consumer %s: %w", g, err)
			}
		}()
	}
	r.stop = cancel
	go func() { wg.Wait(); close(r.done) }()
	r.prod = startLTProducer(ctx, db.Pool, r.topic, cfg.Producers, cfg.Batch)
	ok = true
	return r, nil
}

func (r *ltRig) close() {
	if r.prod != nil {
		_ = r.prod.Stop()
	}
	if r.stop != nil {
		r.stop()
		<-r.done
	}
	if r.sidecar != nil && r.sidecar.Process != nil {
		_ = r.sidecar.Process.Signal(syscall.SIGTERM)
		_ = r.sidecar.Wait()
	}
	if r.consumers != nil {
		r.consumers.Close()
	}
	r.db.Close()
}

// ltWindow is one measured window at one publish rate.
type ltWindow struct {
	Rate          float64        `json:"rate"`
	Seconds       float64        `json:"seconds"`
	Achieved      float64        `json:"published_per_s"`
	Deliveries    float64        `json:"deliveries_per_s"`
	FetchClient   LatencySummary `json:"fetch_client"`
	PgssMeanMs    optFloat       `json:"fetch_pgss_mean_ms"`
	PgssP95EstMs  optFloat       `json:"fetch_pgss_p95_est_ms"`
	PgssCalls     int64          `json:"fetch_pgss_calls"`
	WalMBps       float64        `json:"wal_mb_per_s"`
	LagMax        int64          `json:"lag_max_messages"`
	Retained      int64          `json:"retained_messages"`
	RetainedBound int64          `json:"retained_bound"`
	CleanupRatio  optFloat       `json:"cleanup_vs_production"`
	BloatBytesPct optFloat       `json:"bloat_bytes_pct"`
	BloatMsgPct   optFloat       `json:"bloat_message_tables_pct"`
	BloatCatPct   optFloat       `json:"bloat_catalog_pct"`
	DeadTupPct    optFloat       `json:"n_dead_tup_pct"`
	Missed        int64          `json:"writes_missed"`
	Full          bool           `json:"confirming"`
	Broke         []string       `json:"broke,omitempty"`
}

func (w ltWindow) ok() bool { return len(w.Broke) == 0 }

// optFloat is a figure that may be not measured (NaN), written as null.
type optFloat float64

func (f optFloat) fmt(prec int) string {
	if math.IsNaN(float64(f)) {
		return "not sampled"
	}
	return strconv.FormatFloat(float64(f), 'f', prec, 64)
}

func (f optFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// window runs the producers at rate for ramp (unmeasured), then measures
// for d. A confirming window (full) also samples bloat every cfg.Sample and
// judges bloat and cleanup, which need partitions to rotate and go.
func (r *ltRig) window(ctx context.Context, rate float64, ramp, d time.Duration, full bool, disk diskRate) (ltWindow, error) {
	nan := optFloat(math.NaN())
	w := ltWindow{Rate: rate, Full: full, BloatBytesPct: nan, BloatMsgPct: nan, BloatCatPct: nan,
		DeadTupPct: nan, PgssMeanMs: nan, PgssP95EstMs: nan, CleanupRatio: nan}
	r.prod.SetRate(rate)
	if err := r.sleep(ctx, ramp); err != nil {
		return w, err
	}
	r.fetch.take()
	if r.pgss {
		if _, err := r.db.Pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return w, err
		}
	}
	wal0, err := walLSN(ctx, r.db.Pool)
	if err != nil {
		return w, err
	}
	pub0, del0, missed0 := r.prod.count.Load(), r.delivered.Load(), r.prod.missed.Load()
	ret0, _, err := topicSize(ctx, r.db.Pool, r.topic)
	if err != nil {
		return w, err
	}
	t0 := time.Now()
	var bytes []bloatBytes
	var tuples []bloatSample
	for elapsed := time.Duration(0); elapsed < d; elapsed = time.Since(t0) {
		next := d - elapsed
		if full {
			next = min(next, r.cfg.Sample)
		}
		if err := r.sleep(ctx, next); err != nil {
			return w, err
		}
		if full {
			b, err := sampleBloatBytes(ctx, r.db.Pool)
			if err != nil {
				return w, err
			}
			t, err := sampleBloat(ctx, r.db.Pool, r.topic)
			if err != nil {
				return w, err
			}
			bytes, tuples = append(bytes, b), append(tuples, t)
		}
	}
	secs := time.Since(t0).Seconds()
	wal1, err := walLSN(ctx, r.db.Pool)
	if err != nil {
		return w, err
	}
	pub1, del1, missed1 := r.prod.count.Load(), r.delivered.Load(), r.prod.missed.Load()
	ret1, _, err := topicSize(ctx, r.db.Pool, r.topic)
	if err != nil {
		return w, err
	}
	w.Seconds = secs
	w.Achieved = float64(pub1-pub0) / secs
	w.Deliveries = float64(del1-del0) / secs
	w.FetchClient = summarize(r.fetch.take())
	w.WalMBps = float64(wal1-wal0) / secs / 1e6
	if err := r.db.Pool.QueryRow(ctx, `SELECT coalesce(max(lag_messages), 0)::bigint FROM fanout.groups WHERE topic = $1`,
		r.topic).Scan(&w.LagMax); err != nil {
		return w, fmt.Errorf("lag: %w", err)
	}
	if r.pgss {
		// pg_stat_statements keeps a mean and a standard deviation, no
		// percentiles: p95 ≈ mean + 1.645 σ (exact for a normal
		// distribution; latency tails are longer, so it reads low).
		var mean, sd float64
		if err := r.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint,
			coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0), coalesce(max(stddev_exec_time), 0)
			FROM pg_stat_statements WHERE query LIKE '%fanout.read(%' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).
			Scan(&w.PgssCalls, &mean, &sd); err != nil {
			return w, fmt.Errorf("pg_stat_statements: %w", err)
		}
		w.PgssMeanMs, w.PgssP95EstMs = optFloat(mean), optFloat(mean+1.645*sd)
	}
	// Judge, in the order the report names the first threshold to break.
	w.Missed = missed1 - missed0
	if w.Achieved < 0.95*rate {
		w.Broke = append(w.Broke, fmt.Sprintf("publish (%.0f of %.0f msg/s committed)", w.Achieved, rate))
	}
	if lagBound := int64(2*rate) + int64(2*r.cfg.Page); w.LagMax > lagBound {
		w.Broke = append(w.Broke, fmt.Sprintf("consumers behind (lag %d > %d)", w.LagMax, lagBound))
	}
	if w.FetchClient.N == 0 || w.FetchClient.P95 >= 10 {
		w.Broke = append(w.Broke, fmt.Sprintf("fetch p95 %.1f ms", w.FetchClient.P95))
	}
	if disk.MBps > 0 && w.WalMBps >= 0.5*disk.MBps {
		w.Broke = append(w.Broke, fmt.Sprintf("WAL %.0f MB/s ≥ 50 %% of %.0f MB/s", w.WalMBps, disk.MBps))
	}
	if full {
		steady := bytes
		if len(steady) > 1 {
			steady = steady[1:] // the first sample may still see the step before
		}
		var b, m, c, t float64
		for _, s := range steady {
			b, m, c = b+s.Pct/float64(len(steady)), m+s.MsgPct/float64(len(steady)), c+s.CatalogPct/float64(len(steady))
		}
		for _, s := range tuples {
			t += s.Pct / float64(len(tuples))
		}
		w.BloatBytesPct, w.BloatMsgPct, w.BloatCatPct, w.DeadTupPct = optFloat(b), optFloat(m), optFloat(c), optFloat(t)
		if b >= 20 {
			w.Broke = append(w.Broke, fmt.Sprintf("bloat %.1f %%", b))
		}
		// Cleanup keeps up when what is retained stays within what the
		// topic's settings must hold: a partition being filled, one
		// waiting out its retention, and a maintenance period of slack.
		w.Retained = ret1
		w.RetainedBound = int64(rate * (60 + 60 + 60))
		if published := pub1 - pub0; published > 0 {
			w.CleanupRatio = optFloat(float64(published-(ret1-ret0)) / float64(published))
		}
		if ret1 > w.RetainedBound {
			w.Broke = append(w.Broke, fmt.Sprintf("cleanup behind (retained %d > %d)", ret1, w.RetainedBound))
		}
	}
	return w, nil
}

func (r *ltRig) sleep(ctx context.Context, d time.Duration) error {
	if e := r.prod.err.Load(); e != nil {
		return fmt.Errorf("publish: %w", *e)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-r.errc:
		return err
	case <-time.After(d):
		return nil
	}
}

// drain stops publishing until the groups have caught up (bounded), so a
// failed step's backlog does not count against the next one.
func (r *ltRig) drain(ctx context.Context) error {
	r.prod.SetRate(0)
	deadline := time.Now().Add(r.env.Dur(60*time.Second, 15*time.Second))
	for time.Now().Before(deadline) {
		var lag int64
		if err := r.db.Pool.QueryRow(ctx, `SELECT coalesce(max(lag_messages), 0)::bigint FROM fanout.groups WHERE topic = $1`,
			r.topic).Scan(&lag); err != nil {
			return err
		}
		if lag <= int64(r.cfg.Page) {
			return nil
		}
		if err := r.sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// ltRowResult is one row's search and confirmation.
type ltRowResult struct {
	Row       matrixRow
	Cores     string // "" = every core
	Steps     []ltWindow
	Confirm   []ltWindow
	Sustained float64  // 0: not even the lowest step held
	Best      ltWindow // the confirming window at Sustained
	FirstBad  float64  // the lowest rate that broke a threshold (0: none did)
	BrokeAt   string   // what broke first there
}

func runLTRow(ctx context.Context, env *Env, cfg ltConfig, row matrixRow, disk diskRate, sidecar, cores string) (ltRowResult, error) {
	res := ltRowResult{Row: row, Cores: cores}
	rig, err := newLTRig(ctx, env, cfg, row, sidecar)
	if err != nil {
		return res, err
	}
	defer rig.close()
	if cores != "" {
		restore, err := pinServer(ctx, rig.db.Pool, cores)
		if err != nil {
			return res, err
		}
		defer restore()
	}
	seed := ltSeedRate(row)
	rate := min(cfg.Start, seed)
	rig.prod.SetRate(rate / 10)
	if err := rig.sleep(ctx, cfg.Warmup); err != nil {
		return res, err
	}
	good, bad := 0.0, 0.0
	for step := 0; step < cfg.MaxSteps; step++ {
		w, err := rig.window(ctx, rate, cfg.Ramp, cfg.Step, false, disk)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, w)
		env.Logf("%s%s step %d: %s", row.id, coresLabel(cores), step+1, w.line())
		if w.ok() {
			good = rate
		} else {
			bad, res.BrokeAt = rate, w.Broke[0]
			if err := rig.drain(ctx); err != nil {
				return res, err
			}
		}
		switch {
		case good >= seed:
		case bad == 0:
			rate = min(2*rate, seed)
			continue
		case good == 0:
			rate = bad / 2
			continue
		case (bad-good)/bad > 0.15:
			rate = (good + bad) / 2
			continue
		}
		break
	}
	res.FirstBad = bad
	// Best: the step at the sustained rate, or when none held the lowest
	// rate tried (its figures show what broke even there).
	res.Best = res.Steps[len(res.Steps)-1]
	for _, s := range res.Steps {
		if (good > 0 && s.Rate == good && s.ok()) || (good == 0 && s.Rate < res.Best.Rate) {
			res.Best = s
		}
	}
	if cores != "" || good == 0 {
		res.Sustained = good
		return res, nil
	}
	// Confirm over the long window; step down a fifth at a time if it
	// does not hold there.
	for try := 0; try < 3 && good > 0; try++ {
		w, err := rig.window(ctx, good, cfg.Ramp, cfg.Confirm, true, disk)
		if err != nil {
			return res, err
		}
		res.Confirm = append(res.Confirm, w)
		env.Logf("%s confirm at %.0f msg/s: %s", row.id, good, w.line())
		if w.ok() {
			res.Sustained, res.Best = good, w
			return res, nil
		}
		if res.FirstBad == 0 || good < res.FirstBad {
			res.FirstBad, res.BrokeAt = good, w.Broke[0]
		}
		if err := rig.drain(ctx); err != nil {
			return res, err
		}
		good *= 0.8
	}
	return res, nil
}

func coresLabel(cores string) string {
	if cores == "" {
		return ""
	}
	return " (server on CPU " + cores + ")"
}

func (w ltWindow) line() string {
	s := fmt.Sprintf("%.0f msg/s asked, %.0f published/s, %.0f deliveries/s, fetch p50 %s / p95 %s ms (pg_stat_statements mean %s, p95≈%s), WAL %.1f MB/s, lag %d",
		w.Rate, w.Achieved, w.Deliveries, fmtMs(w.FetchClient.P50), fmtMs(w.FetchClient.P95), fmtMs(float64(w.PgssMeanMs)), fmtMs(float64(w.PgssP95EstMs)), w.WalMBps, w.LagMax)
	if w.Full {
		s += fmt.Sprintf(", bloat %.1f %% (message tables %.1f %%, catalog %.1f %%; n_dead_tup %.1f %%), retained %d (bound %d), cleanup/production %.2f",
			w.BloatBytesPct, w.BloatMsgPct, w.BloatCatPct, w.DeadTupPct, w.Retained, w.RetainedBound, w.CleanupRatio)
	}
	if w.ok() {
		return s + ": holds"
	}
	return s + ": BROKE " + strings.Join(w.Broke, "; ")
}

// capacity is the busiest window of the row: the most deliveries per
// second it reached, whatever broke there. Where no rate holds every
// threshold, it is what the row can do at all, and the figure the per-core
// projection needs (the sustained rate's window is not saturated).
func (res ltRowResult) capacity() ltWindow {
	var best ltWindow
	for _, w := range append(append([]ltWindow(nil), res.Steps...), res.Confirm...) {
		if w.Deliveries > best.Deliveries {
			best = w
		}
	}
	return best
}

// result is the row's line of results-lt.json.
func (res ltRowResult) result(cfg ltConfig, disk diskRate) Result {
	seed := ltSeedRate(res.Row)
	label := fmt.Sprintf("%s %s, %d groups", res.Row.id, res.Row.completion, res.Row.groups)
	r := Result{Scenario: "lt", Case: label + ": sustained publish rate", Unit: "msg/s", Value: res.Sustained,
		Baseline: seed, BaseName: "seed rate", Ratio: ratio(res.Sustained, seed), HigherIsBetter: true,
		Details: map[string]any{"steps": res.Steps, "confirm": res.Confirm, "first_bad_rate": res.FirstBad,
			"first_broken": res.BrokeAt, "page": cfg.Page, "batch": cfg.Batch, "producers": cfg.Producers,
			"disk_mb_per_s": disk.MBps, "linger_ms": cfg.Linger.Seconds() * 1000,
			"capacity_deliveries_per_s": res.capacity().Deliveries, "capacity_published_per_s": res.capacity().Achieved}}
	b := res.Best
	broke := "none up to the seed's rate"
	if res.FirstBad > 0 {
		broke = fmt.Sprintf("%s at %.0f msg/s", res.BrokeAt, res.FirstBad)
	}
	at := ""
	switch {
	case res.Sustained == 0 && len(res.Confirm) > 0:
		at = fmt.Sprintf(" (the search held at %.0f msg/s, the long window did not, down to %.0f; figures of the search step)",
			res.Confirm[0].Rate, res.Confirm[len(res.Confirm)-1].Rate)
	case res.Sustained == 0:
		at = fmt.Sprintf(" (no rate tried held; figures at the lowest, %.0f msg/s)", b.Rate)
	}
	r.ValueText = fmt.Sprintf("%.0f msg/s = %.2f of %.0f%s; %.0f deliveries/s; first to break above: %s; fetch p95 client %s ms, "+
		"pg_stat_statements mean %s / p95≈%s ms; bloat %s %% bytes (n_dead_tup %s %%); WAL %.1f MB/s of %.0f MB/s disk; cleanup/production %s",
		res.Sustained, r.Ratio, seed, at, b.Deliveries, broke, fmtMs(b.FetchClient.P95), fmtMs(float64(b.PgssMeanMs)), fmtMs(float64(b.PgssP95EstMs)),
		b.BloatBytesPct.fmt(1), b.DeadTupPct.fmt(1), b.WalMBps, disk.MBps, b.CleanupRatio.fmt(2))
	if c := res.capacity(); c.Deliveries > b.Deliveries {
		r.ValueText += fmt.Sprintf("; capacity: %.0f deliveries/s (%.0f published/s, fetch p95 %s ms) at %.0f msg/s asked",
			c.Deliveries, c.Achieved, fmtMs(c.FetchClient.P95), c.Rate)
	}
	if res.Row.id == "LT-4" {
		r.Note = "the design expects reference mode to break here (32 groups): the figure shows where"
	}
	return r
}

// ltProjection projects a row's deliveries/s to bigger servers from the
// same row searched with the server on one core and on every core, each at
// its capacity (the busiest window: a rate that holds is not saturated, so
// it says nothing about cores).
func ltProjection(one, all ltRowResult) Result {
	n := float64(runtime.NumCPU())
	d1, dn := one.capacity().Deliveries, all.capacity().Deliveries
	perCore := (dn - d1) / math.Max(n-1, 1)
	project := func(cores float64) float64 { return d1 + (cores-1)*perCore }
	seedDeliveries := ltSeedRate(all.Row) * float64(all.Row.groups)
	r := Result{Scenario: "lt", Case: all.Row.id + ": deliveries/s projected to 16 and 64 cores", Unit: "deliveries/s",
		Value: project(16), Baseline: seedDeliveries, BaseName: "seed rate", Ratio: ratio(project(16), seedDeliveries),
		HigherIsBetter: true,
		Details: map[string]any{"one_core": d1, "all_cores": dn, "cores": n, "per_core": perCore,
			"projected_16": project(16), "projected_64": project(64)}}
	r.ValueText = fmt.Sprintf("1 core %.0f, %.0f cores %.0f deliveries/s: %.0f per added core; 16 cores ≈ %.0f + 15 × %.0f = %.0f, "+
		"64 cores ≈ %.0f + 63 × %.0f = %.0f (seed: %.0f); each at its busiest window", d1, n, dn, perCore, d1, perCore, project(16), d1, perCore, project(64), seedDeliveries)
	r.Note = "linear in the cores the server gets (the bench client and the sidecar stay unpinned and share the machine): " +
		"an upper bound, since WAL insertion, the topic's sequence and commit flushes serialize"
	return r
}

// pinServer restricts the server (postmaster and every process it has and
// will fork) to cpus, and returns the undo.
func pinServer(ctx context.Context, pool *pgxpool.Pool, cpus string) (func(), error) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, err
	}
	postmaster, err := parentPID(backend)
	if err != nil {
		return nil, fmt.Errorf("server on this machine? %w", err)
	}
	pids := []int{postmaster}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := parentPID(pid); err == nil && pp == postmaster {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	set := func(cpus string) error {
		for _, pid := range pids {
			if out, err := exec.Command("taskset", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil &&
				!strings.Contains(string(out), "No such process") {
				return fmt.Errorf("taskset %d: %w: %s", pid, err, out)
			}
		}
		return nil
	}
	if err := set(cpus); err != nil {
		return nil, err
	}
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	return func() { _ = set(all) }, nil
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	return strconv.Atoi(f[1])
}

// ltProducer is the application: producer connections each doing business
// writes (a row of lt_orders and its message, or cfg.Batch of each, in one
// transaction) at a rate that can change while it runs. Writes the
// connections cannot keep up with are counted as missed, not queued.
type ltProducer struct {
	rate   atomic.Uint64 // math.Float64bits(messages per second)
	count  atomic.Int64  // messages committed
	missed atomic.Int64  // writes due that found every producer busy
	err    atomic.Pointer[error]
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startLTProducer(ctx context.Context, pool *pgxpool.Pool, topic string, workers, batch int) *ltProducer {
	p := &ltProducer{stop: make(chan struct{})}
	jobs := make(chan struct{}, workers)
	msgs := make([]client.Message, batch)
	for i := range msgs {
		msgs[i] = client.Message{Payload: benchPayload, Headers: benchHeaders}
	}
	for w := 0; w < workers; w++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for range jobs {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO lt_orders (customer, total)
						SELECT (random() * 1e6)::int, (random() * 1000)::numeric(12,2) FROM generate_series(1, $1)`, batch); err != nil {
						return err
					}
					pub := client.NewPublisher(tx)
					if batch == 1 {
						_, err := pub.Publish(ctx, topic, msgs[0])
						return err
					}
					_, err := pub.PublishBatch(ctx, topic, msgs)
					return err
				})
				if err != nil {
					if ctx.Err() == nil {
						p.err.CompareAndSwap(nil, &err)
					}
					continue
				}
				p.count.Add(int64(batch))
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(jobs)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last, due := time.Now(), 0.0
		for {
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due += math.Float64frombits(p.rate.Load()) / float64(batch) * now.Sub(last).Seconds()
				last = now
				for ; due >= 1; due-- {
					select {
					case jobs <- struct{}{}:
					default:
						p.missed.Add(1)
					}
				}
			}
		}
	}()
	return p
}

// SetRate changes the publish rate (messages per second; 0 pauses).
func (p *ltProducer) SetRate(rate float64) { p.rate.Store(math.Float64bits(rate)) }

// Stop ends publishing and returns the first error.
func (p *ltProducer) Stop() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}
