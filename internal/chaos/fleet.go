package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// topicSpec is one topic of a run with its groups and their workers.
type topicSpec struct {
	name     string
	create   string // extra create_topic arguments
	groups   []groupSpec
	isQueue  bool
	complete string // "", "offset" or "reference" (for the report)
	// kind: "" for the plain producers' topics, else the kindProducers
	// loop that publishes to it (kpart, seq or misc).
	kind string
}

type groupSpec struct {
	name    string // "" for the queue's implicit group
	workers []string
	// since: the group subscribed during the run (events.go); only what
	// committed after it is owed to it.
	since time.Time
	// scripted: seek and replay hand the group's messages out again, with
	// attempt 1: its redeliveries are not classified.
	scripted bool
}

func (g groupSpec) label() string {
	if g.name == "" {
		return "queue"
	}
	return g.name
}

// soakTopics is the soak's topology: a queue with competing consumers (one
// of them a relay that publishes in its read transaction), an
// offset-mode pubsub topic with three groups of two members, a
// reference-mode pubsub topic with two groups; SQL workers and both kinds of
// client-package workers. Then the newer kinds (producer_kinds.go): a
// key-partitioned pubsub topic (P = 8) with an automatic group (k1) and an
// explicit one (k2, read(partition => k)); a sequence-ordered pubsub topic
// with two groups; a queue of delayed, prioritized and deduplicated
// messages.
func soakTopics(cfg Config) []topicSpec {
	first := kindRelay
	if cfg.NoRelay {
		first = kindSQL
	}
	common := `max_attempts => 1000, partition_interval => '1 minute', retention => '1 minute'`
	// The newer kinds' table partitions (a new one every minute, the
	// shortest interval) are dropped as soon as every group passed them
	// (retention 0), while messages wait behind sequence gaps, in delays and
	// in key partitions' pages.
	short := `max_attempts => 1000, partition_interval => '1 minute', retention => '0'`
	return []topicSpec{
		{name: "chaos.queue", create: common, isQueue: true, complete: "queue",
			groups: []groupSpec{{workers: []string{first, kindSQL, kindClient}}}},
		{name: "chaos.offset", create: `semantics => 'pubsub', ` + common, complete: "offset",
			groups: []groupSpec{
				{name: "o1", workers: []string{kindSQL, kindSQL}},
				{name: "o2", workers: []string{kindClient, kindClientTx}},
				{name: "o3", workers: []string{kindSQL, kindClient}},
			}},
		{name: "chaos.ref", create: `semantics => 'pubsub', completion => 'reference', ` + common, complete: "reference",
			groups: []groupSpec{
				{name: "r1", workers: []string{kindSQL, kindClientTx}},
				{name: "r2", workers: []string{kindSQL}},
			}},
		{name: "chaos.kpart", create: `semantics => 'pubsub', partitions => 8, ` + short, complete: "offset",
			kind: "kpart", groups: []groupSpec{
				{name: "k1", workers: []string{kindTimed, kindTimed, kindClient}},
				{name: "k2", workers: []string{kindExplicit, kindExplicit}},
			}},
		{name: "chaos.seq", create: `semantics => 'pubsub', sequence_ordering => true, ` + short, complete: "offset",
			kind: "seq", groups: []groupSpec{
				{name: "s1", workers: []string{kindTimed, kindTimed}},
				{name: "s2", workers: []string{kindTimed}},
			}},
		{name: "chaos.misc", create: short, isQueue: true, complete: "queue", kind: "misc",
			groups: []groupSpec{{workers: []string{kindTimed, kindClient}}}},
	}
}

// fleet is everything that runs against one database: topics, producers,
// workers and two schedulers.
type fleet struct {
	cfg     Config
	url     string // clients' URL (may be multi-host)
	adminDB string // for setup and faults
	dbName  string
	topics  []topicSpec
	sup     *supervisor
	workers []*proc
	scheds  []*proc
	prod    *producers
	kprod   *kindProducers // nil without topics of the newer kinds
	// rejoin: members of the automatic key-partition group; every second
	// worker kill is one of them (its partitions move, then move back).
	rejoin []*proc
	// clients: the client-package workers (shut down mid-page: stop).
	clients []*proc
	// timeline is the harness's record file of the fault timeline (S and X
	// lines, records.go).
	timeline *recorder
}

func (f *fleet) setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.adminDB)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, t := range f.topics {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`SELECT fanout.create_topic($1, %s)`, t.create), t.name); err != nil {
			return fmt.Errorf("create_topic %s: %w", t.name, err)
		}
		for _, g := range t.groups {
			if g.name == "" {
				continue
			}
			if _, err := conn.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, heartbeat_timeout => '10 minutes')`,
				t.name, g.name); err != nil {
				return fmt.Errorf("subscribe %s/%s: %w", t.name, g.name, err)
			}
		}
	}
	return nil
}

func (f *fleet) startWorkers() error {
	for _, t := range f.topics {
		for _, g := range t.groups {
			if err := f.startGroup(t, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// startGroup starts the workers of one group.
func (f *fleet) startGroup(t topicSpec, g groupSpec) error {
	for i, kind := range g.workers {
		name := fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(t.name, "chaos."), g.label(), i+1)
		late, overruns := 0, 0
		if kind == kindSQL || kind == kindTimed || kind == kindExplicit {
			late = f.cfg.LateAcks
		}
		if kind == kindClient || kind == kindClientTx {
			overruns = f.cfg.Overruns
		}
		spec, _ := json.Marshal(workerSpec{Name: name, Kind: kind, URL: f.url, Topic: t.name, Group: g.name,
			Page: f.cfg.PageSize, Lease: f.cfg.Lease, LateAcks: late, Overruns: overruns, RunDir: f.cfg.RunDir})
		p := &proc{name: name, exe: f.cfg.Exe, env: []string{WorkerEnv + "=" + string(spec)}}
		if err := f.sup.add(p); err != nil {
			return err
		}
		f.workers = append(f.workers, p)
		if t.kind == "kpart" && kind != kindExplicit {
			f.rejoin = append(f.rejoin, p)
		}
		if kind == kindClient || kind == kindClientTx {
			f.clients = append(f.clients, p)
		}
	}
	return nil
}

// startSchedulers starts n pgq-scheduler run copies (one becomes leader).
func (f *fleet) startSchedulers(n int) error {
	for i := range n {
		name := fmt.Sprintf("sched-%d", i+1)
		p := &proc{name: name, exe: f.cfg.SchedulerBin, args: []string{"run", "--database-url", f.url, "--listen", "",
			"--leader-id", name, "--leader-ttl", "3s", "--default-schedule", "@every 2s", "--jitter", "0",
			"--job-timeout", "20s", "--log-level", "warn"}}
		if err := f.sup.add(p); err != nil {
			return err
		}
		f.scheds = append(f.scheds, p)
	}
	return nil
}

func (f *fleet) startProducers(ctx context.Context) error {
	var names []string
	kp := &kindProducers{url: f.url, rate: max(f.cfg.Rate/6, 1), rollback: f.cfg.RollbackPercent,
		runDir: f.cfg.RunDir, log: f.cfg.Logger}
	for _, t := range f.topics {
		switch t.kind {
		case "":
			names = append(names, t.name)
		case "kpart":
			kp.kpart, f.kprod = t.name, kp
		case "seq":
			kp.seq, f.kprod = t.name, kp
		case "misc":
			kp.misc, f.kprod = t.name, kp
		}
	}
	f.prod = &producers{url: f.url, topics: names, rate: f.cfg.Rate, n: f.cfg.Producers,
		rollback: f.cfg.RollbackPercent, runDir: f.cfg.RunDir, log: f.cfg.Logger}
	if err := f.prod.start(ctx); err != nil {
		return err
	}
	if f.kprod != nil {
		if err := f.kprod.start(ctx); err != nil {
			f.prod.stop()
			return err
		}
	}
	return nil
}

// stopProducers stops every producer (the sequence producer fills its gaps
// first).
func (f *fleet) stopProducers() {
	f.prod.stop()
	if f.kprod != nil {
		f.kprod.stop()
	}
}

// faultCounts are the faults actually injected.
type faultCounts struct {
	Restarts, Terminated, KilledMidPage, KilledOther, LeaderKills int
	Stopped                                                       int // client workers shut down (mid-page or idle)
}

// terminate runs pg_terminate_backend on up to n random consumer backends.
func (f *fleet) terminate(ctx context.Context, n int) (int, error) {
	conn, err := pgx.Connect(ctx, f.adminDB)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var k int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND application_name LIKE 'chaos-w-%' ORDER BY random() LIMIT $2) t`,
		f.dbName, n).Scan(&k)
	return k, err
}

// killWorker arms a random worker to SIGKILL itself mid-page (SIGUSR1) and
// SIGKILLs it from outside if it did not within 3 s (an idle worker).
func (f *fleet) killWorker(fc *faultCounts) {
	f.killWorkerIn(f.workers, fc)
}

// killWorkerIn is killWorker among ps.
func (f *fleet) killWorkerIn(ps []*proc, fc *faultCounts) {
	p := ps[rand.IntN(len(ps))]
	if p.pid() == 0 {
		return
	}
	_, exited := p.kill(syscall.SIGUSR1)
	select {
	case <-exited:
		fc.KilledMidPage++
		f.cfg.Logger.Info("worker SIGKILLed itself mid-page", "worker", p.name)
	case <-time.After(3 * time.Second):
		if pid, _ := p.kill(syscall.SIGKILL); pid != 0 && f.timeline != nil {
			// It may hold handled, un-acked messages all the same (between
			// its handlers and its ack).
			_ = f.timeline.write(line("X", fmt.Sprintf("%s-%d", p.name, pid), time.Now().UnixNano()))
		}
		fc.KilledOther++
		f.cfg.Logger.Info("worker SIGKILLed (no page in hand)", "worker", p.name)
	}
}

// stopClient shuts a random client-package worker down from inside its
// next handler (SIGUSR2: a shutdown mid-page) and waits for it to exit; the
// supervisor starts it again.
func (f *fleet) stopClient(fc *faultCounts) {
	if len(f.clients) == 0 {
		return
	}
	p := f.clients[rand.IntN(len(f.clients))]
	if p.pid() == 0 {
		return
	}
	_, exited := p.kill(syscall.SIGUSR2)
	select {
	case <-exited:
		fc.Stopped++
		f.cfg.Logger.Info("client worker shut down mid-page", "worker", p.name)
	case <-time.After(30 * time.Second):
		f.cfg.Logger.Warn("client worker did not stop within 30 s", "worker", p.name)
	}
}

// killLeader SIGKILLs the scheduler copy that holds fanout.leader.
func (f *fleet) killLeader(ctx context.Context, fc *faultCounts) error {
	conn, err := pgx.Connect(ctx, f.adminDB)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var id string
	if err := conn.QueryRow(ctx, `SELECT leader_id FROM fanout.leader WHERE name = 'pgq-scheduler' AND expires_at > now()`).
		Scan(&id); err != nil {
		return fmt.Errorf("no leader: %w", err)
	}
	for _, p := range f.scheds {
		if p.name == id && p.pid() != 0 {
			p.kill(syscall.SIGKILL)
			fc.LeaderKills++
			f.cfg.Logger.Info("scheduler leader SIGKILLed", "leader", id)
			return nil
		}
	}
	return fmt.Errorf("leader %q is none of ours", id)
}

// drain waits until every group of the run has nothing unread, in flight or
// waiting for a retry (twice in a row).
func (f *fleet) drain(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(f.cfg.DrainTimeout)
	clean := 0
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(min(f.cfg.Lease/2, 500*time.Millisecond)):
		}
		conn, err := pgx.Connect(ctx, f.adminDB)
		if err != nil {
			continue
		}
		var busy int
		err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lag_messages > 0 OR in_flight > 0 OR retry_pending > 0)
			FROM fanout.groups`).Scan(&busy)
		if err == nil {
			_ = conn.QueryRow(ctx, `SELECT string_agg(format('%s/%s lag %s in_flight %s retry %s', topic,
				coalesce(group_name, 'queue'), lag_messages, in_flight, retry_pending), '; ')
				FROM fanout.groups WHERE lag_messages > 0 OR in_flight > 0 OR retry_pending > 0`).Scan(&last)
		}
		conn.Close(ctx)
		if err != nil {
			continue
		}
		if busy == 0 {
			clean++
			if clean >= 2 {
				return time.Since(start), nil
			}
		} else {
			clean = 0
		}
	}
	return time.Since(start), fmt.Errorf("groups not drained within %s: %s", f.cfg.DrainTimeout, last)
}

// startFailoverFleet sets up the failover topics on url (a multi-host URL)
// and starts schedulers, workers and producers against it, recording under
// cfg.RunDir/name: the load of the failover and HA scenarios. The returned
// fleet, also on an error once its supervisor exists, must be stopped with
// f.sup.stopAll.
func startFailoverFleet(ctx context.Context, cfg Config, log *slog.Logger, name, url, dbName string,
	schedulers int) (*fleet, error) {
	runDir := filepath.Join(cfg.RunDir, name)
	if err := mkdir(runDir); err != nil {
		return nil, err
	}
	fcfg := cfg
	fcfg.RunDir = runDir
	sup := &supervisor{runDir: runDir, log: log, restartDelay: time.Second}
	f := &fleet{cfg: fcfg, url: url, adminDB: url, dbName: dbName, topics: failoverTopics(), sup: sup}
	if err := f.setup(ctx); err != nil {
		return f, err
	}
	if err := f.startSchedulers(schedulers); err != nil {
		return f, err
	}
	if err := f.startWorkers(); err != nil {
		return f, err
	}
	if err := f.startProducers(ctx); err != nil {
		return f, err
	}
	return f, nil
}
