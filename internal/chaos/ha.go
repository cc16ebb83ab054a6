package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// HAConfig configures RunHA (make ha). Zero values mean the defaults named
// per field.
type HAConfig struct {
	// Root is the repository checkout. Default: found from the working
	// directory.
	Root string
	// BasePort is the first of the run's ports: etcd BasePort and +1, the
	// PostgreSQL nodes +10..+12, their Patroni REST APIs +20..+22.
	// Default 36100.
	BasePort int
	// Duration of the scripted run; the events come at 20 % (switchover),
	// 50 % (crash of the leader) and 80 % (switch back) of it. Default 300 s
	// (switchover ~60 s, crash ~150 s, switch back ~240 s).
	Duration time.Duration
	// Rate of the producers in transactions per second. Default 30.
	Rate float64
	// Manager is the HA manager: "patroni" (default) or "pgaf"
	// (pg_auto_failover).
	Manager string
	// NoAsync leaves out the asynchronous variant that follows the run
	// (ha_async.go: a stale ack after a failover that lost a page).
	NoAsync bool
	// Exe, SchedulerBin, RunDir, Logger: as in Config.
	Exe, SchedulerBin, RunDir string
	Logger                    *slog.Logger
}

// Bounds of the done-when line (docs/ha.md).
const (
	haMaxSwitchoverGap = 10 * time.Second
	haMaxCrashGap      = 30 * time.Second
	haSchedulerTTL     = 3 * time.Second // startSchedulers' --leader-ttl
	haLeaderSlack      = 5 * time.Second
)

// HASummary is the outcome of RunHA: its final line's numbers.
type HASummary struct {
	Lost, BadDuplicates, RolledBackDelivered int
	// SwitchoverGap is the longest write gap of the two switchovers,
	// CrashGap that of the crash; LeaderGap the longest time from writes
	// resuming to the maintenance leader's first renewal after it.
	SwitchoverGap, CrashGap, LeaderGap time.Duration
	Problems                           []string
}

// Line is the run's final line.
func (s HASummary) Line() string {
	return fmt.Sprintf("ha: %d lost, %d bad duplicates, %d rolled-back delivered, write gap %.1f s (switchover) / %.1f s (crash), leader gap %.1f s",
		s.Lost, s.BadDuplicates, s.RolledBackDelivered, s.SwitchoverGap.Seconds(), s.CrashGap.Seconds(), s.LeaderGap.Seconds())
}

// OK: 0/0/0, the gaps within their bounds, no other problem.
func (s HASummary) OK() bool {
	return s.Lost == 0 && s.BadDuplicates == 0 && s.RolledBackDelivered == 0 && s.SwitchoverGap <= haMaxSwitchoverGap &&
		s.CrashGap <= haMaxCrashGap && s.LeaderGap <= haSchedulerTTL+haLeaderSlack && len(s.Problems) == 0
}

// probe commits one row every 100 ms through the clients' multi-host URL
// and remembers when each COMMIT returned OK: the write gaps.
type probe struct {
	mu sync.Mutex
	ok []time.Time
}

func (p *probe) run(ctx context.Context, url string) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return
	}
	cfg.ConnectTimeout = 2 * time.Second
	cfg.RuntimeParams["application_name"] = "chaos-ha-probe"
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				conn = nil
				continue
			}
		}
		// Never cancelled: a COMMIT waiting for its synchronous standby
		// that is cancelled returns OK with a WARNING although no standby
		// has it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `INSERT INTO chaos.ha_probe VALUES (now())`); err != nil {
			conn.Close(context.Background())
			conn = nil
			continue
		}
		p.mu.Lock()
		p.ok = append(p.ok, time.Now())
		p.mu.Unlock()
	}
}

// gap is the longest time between two OK commits from at to until, and
// when writes resumed after it.
func (p *probe) gap(at, until time.Time) (time.Duration, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var longest time.Duration
	var resumed time.Time
	prev := time.Time{}
	for _, t := range p.ok {
		if t.Before(at) {
			prev = t
			continue
		}
		if t.After(until) {
			break
		}
		if !prev.IsZero() && t.Sub(prev) > longest {
			longest, resumed = t.Sub(prev), t
		}
		prev = t
	}
	return longest, resumed
}

// leaderWatch records when the maintenance leader's lease was renewed
// (expires_at − TTL), polling every 200 ms.
type leaderWatch struct {
	mu       sync.Mutex
	renewals []time.Time
}

func (w *leaderWatch) run(ctx context.Context, url string) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				continue
			}
			conn = c
		}
		var exp time.Time
		err := conn.QueryRow(ctx, `SELECT expires_at FROM fanout.leader WHERE name = 'pgq-scheduler'`).Scan(&exp)
		if err != nil {
			if !errors.Is(err, pgx.ErrNoRows) {
				conn.Close(context.Background())
				conn = nil
			}
			continue
		}
		r := exp.Add(-haSchedulerTTL)
		w.mu.Lock()
		if n := len(w.renewals); n == 0 || !w.renewals[n-1].Equal(r) {
			w.renewals = append(w.renewals, r)
		}
		w.mu.Unlock()
	}
}

// after is the time from t to the first renewal after it (-1 if none).
func (w *leaderWatch) after(t time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := append([]time.Time(nil), w.renewals...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Before(rs[j]) })
	for _, r := range rs {
		if r.After(t) {
			return r.Sub(t)
		}
	}
	return -1
}

// RunHA is make ha: etcd and three Patroni nodes (synchronous_mode,
// synchronous_mode_strict), two pgq-scheduler sidecars, the failover
// scenario's producers and consumers on a three-host URL with
// target_session_attrs=read-write; a switchover, a SIGKILL of the leader's
// Patroni and PostgreSQL, the old leader rejoining (pg_rewind), a switch
// back; then the verifier on the final primary.
func RunHA(ctx context.Context, hc HAConfig, out io.Writer) (HASummary, error) {
	var sum HASummary
	cfg, err := Config{Root: hc.Root, Exe: hc.Exe, SchedulerBin: hc.SchedulerBin, RunDir: hc.RunDir, Logger: hc.Logger,
		Rate: hc.Rate}.withDefaults()
	if err != nil {
		return sum, err
	}
	if hc.Rate == 0 {
		cfg.Rate = 30
	}
	if hc.BasePort == 0 {
		hc.BasePort = 36100
	}
	if hc.Duration == 0 {
		hc.Duration = 300 * time.Second
	}
	log := cfg.Logger.With("scenario", "ha")
	fmt.Fprintf(out, "ha: records and logs in %s\n", cfg.RunDir)
	// The servers run as postgres: a folder it can reach (not under /root).
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("pgq-ha-%d", hc.BasePort))
	logf := func(msg string, args ...any) { log.Info(msg, args...) }
	var m haManager
	var pc *patroniCluster
	switch hc.Manager {
	case "", "patroni":
		pc = newPatroniCluster(cfg.Root, dir, hc.BasePort, logf)
		m = patroniManager{pc}
	case "pgaf":
		m = newPgafCluster(dir+"-pgaf", hc.BasePort, logf)
	default:
		return sum, fmt.Errorf("ha: unknown manager %q (patroni, pgaf)", hc.Manager)
	}
	defer m.stop()
	began := time.Now()
	if err := m.start(ctx); err != nil {
		return sum, err
	}
	log.Info("cluster up", "manager", m.label(), "took", time.Since(began).Round(time.Second), "folder", dir)
	first, err := m.leader()
	if err != nil {
		return sum, err
	}
	if first == "" {
		return sum, errors.New("ha: no leader after start")
	}
	const dbName = "chaos_ha"
	if _, err := freshDatabase(ctx, m.nodeURL(first, "postgres"), dbName); err != nil {
		return sum, err
	}
	multi := m.multiURL(dbName)
	{
		c, err := pgx.Connect(ctx, multi)
		if err != nil {
			return sum, err
		}
		_, err = c.Exec(ctx, `CREATE TABLE chaos.ha_probe (at timestamptz NOT NULL)`)
		c.Close(ctx)
		if err != nil {
			return sum, err
		}
	}
	f, err := startFailoverFleet(ctx, cfg, log, "ha", multi, dbName, 2)
	if f != nil {
		defer f.sup.stopAll(context.Background(), 10*time.Second)
	}
	if err != nil {
		return sum, err
	}
	defer f.stopProducers()
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	pr, lw := &probe{}, &leaderWatch{}
	go pr.run(pctx, multi)
	go lw.run(pctx, multi)

	start := time.Now()
	at := func(frac float64) time.Time { return start.Add(time.Duration(float64(hc.Duration) * frac)) }
	sleepUntil := func(t time.Time) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(t)):
			return nil
		}
	}
	type event struct {
		what string
		at   time.Time
	}
	var events []event
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		log.Error(msg)
		sum.Problems = append(sum.Problems, msg)
	}

	// 1. Switchover.
	if err := sleepUntil(at(0.2)); err != nil {
		return sum, err
	}
	events = append(events, event{"switchover", time.Now()})
	if err := m.switchover(ctx, first, ""); err != nil {
		fail("%v", err)
	}
	if err := m.waitHealthy(ctx, 60*time.Second); err != nil {
		fail("after the switchover: %v", err)
	}
	second, _ := m.leader()
	log.Info("switched over", "from", first, "to", second)

	// 2. Crash of the leader: SIGKILL of its Patroni and PostgreSQL.
	if err := sleepUntil(at(0.5)); err != nil {
		return sum, err
	}
	victim := second
	if victim == "" {
		return sum, errors.New("no leader to crash")
	}
	events = append(events, event{"crash", time.Now()})
	if err := m.crash(victim); err != nil {
		fail("%v", err)
	}
	log.Info("leader's manager and PostgreSQL SIGKILLed", "node", victim)
	third := ""
	if err := waitFor(ctx, 90*time.Second, func() error {
		l, err := m.leader()
		if err != nil {
			return err
		}
		if l != "" && l != victim {
			third = l
			return nil
		}
		return errors.New("no new leader")
	}); err != nil {
		fail("no new leader after the crash: %v", err)
	}
	log.Info("new leader after the crash", "node", third)
	// 3. The old leader rejoins (the manager rewinds it with pg_rewind).
	if err := m.restart(victim); err != nil {
		fail("%v", err)
	}
	if err := m.waitHealthy(ctx, 120*time.Second); err != nil {
		fail("after the rejoin: %v", err)
	}
	rewound := m.rewound(victim)

	// 4. Switch back to the first leader.
	if err := sleepUntil(at(0.8)); err != nil {
		return sum, err
	}
	events = append(events, event{"switch back", time.Now()})
	// Back to the first leader; if the crash already made it leader, to
	// the rewound node (it must be able to lead again).
	cand := first
	if cand == third {
		cand = victim
	}
	if err := m.switchover(ctx, third, cand); err != nil {
		fail("%v", err)
	}
	if err := m.waitHealthy(ctx, 60*time.Second); err != nil {
		fail("after the switch back: %v", err)
	}
	if err := sleepUntil(at(1)); err != nil {
		return sum, err
	}
	end := time.Now()
	f.stopProducers()
	if _, err := f.drain(ctx); err != nil {
		fail("drain incomplete: %v", err)
	}
	stopProbes()
	f.sup.stopAll(ctx, 10*time.Second)
	final, err := m.leader()
	if err != nil {
		return sum, err
	}
	log.Info("final leader", "node", final)

	// Gaps: each event's window runs to the next event.
	fmt.Fprintf(out, "\n== ha (%s): %s run; leaders %s -> %s -> (crash) %s -> %s; the crashed node rejoined %s\n",
		m.label(), hc.Duration, first, second, third, final, map[bool]string{true: "with pg_rewind", false: "(no pg_rewind in its log)"}[rewound])
	for i, e := range events {
		until := end
		if i+1 < len(events) {
			until = events[i+1].at
		}
		g, resumed := pr.gap(e.at.Add(-time.Second), until)
		lg := time.Duration(-1)
		if !resumed.IsZero() {
			lg = lw.after(resumed)
		}
		fmt.Fprintf(out, "%-12s at %5.1f s: write gap %.1f s, leader renewed %.1f s after writes resumed\n",
			e.what, e.at.Sub(start).Seconds(), g.Seconds(), lg.Seconds())
		if e.what == "crash" {
			sum.CrashGap = max(sum.CrashGap, g)
		} else {
			sum.SwitchoverGap = max(sum.SwitchoverGap, g)
		}
		if lg < 0 {
			fail("%s: no maintenance-leader renewal after writes resumed", e.what)
		} else {
			sum.LeaderGap = max(sum.LeaderGap, lg)
		}
	}
	v, err := verify(ctx, m.nodeURL(final, dbName), f.cfg.RunDir, f.topics)
	if err != nil {
		return sum, err
	}
	v.print(out)
	sum.Lost, sum.BadDuplicates, sum.RolledBackDelivered = v.totals()
	if len(v.Consistency) > 0 {
		fail("fanout.check_consistency() on the final primary returned %d rows", len(v.Consistency))
	}
	fmt.Fprintf(out, "ha: %d transactions (%d messages) whose COMMIT returned OK are missing on the final primary %s\n",
		v.Txns.CommitLost, v.CommitLostMsgs, final)
	if !hc.NoAsync && pc != nil {
		sum.Problems = append(sum.Problems, runHAAsync(ctx, pc, out, func(msg string, args ...any) { log.Info(msg, args...) })...)
	}
	if sum.SwitchoverGap > haMaxSwitchoverGap {
		fail("switchover write gap %s over %s", sum.SwitchoverGap, haMaxSwitchoverGap)
	}
	if sum.CrashGap > haMaxCrashGap {
		fail("crash write gap %s over %s", sum.CrashGap, haMaxCrashGap)
	}
	if sum.LeaderGap > haSchedulerTTL+haLeaderSlack {
		fail("leader gap %s over TTL %s + %s", sum.LeaderGap, haSchedulerTTL, haLeaderSlack)
	}
	for _, p := range sum.Problems {
		fmt.Fprintln(out, "problem:", p)
	}
	return sum, nil
}

func patroniLogHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}
