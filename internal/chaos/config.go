package chaos

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Config configures a chaos run. Zero values mean the defaults listed per
// field; they are filled in by one function (Config.withDefaults).
type Config struct {
	// Root is the repository checkout (scripts/devdb.sh, bin/). Default: the
	// first folder holding go.mod at or above the working directory.
	Root string
	// Port is the port of the soak's throwaway cluster (and of the
	// long-transaction and dead-group scenarios). Default 25435.
	Port int
	// FailoverPort is the primary's port in the failover scenarios; the
	// standby listens on FailoverPort+1. Default 25436.
	FailoverPort int
	// Cluster names the soak's cluster (.pgq-dev/<Cluster>). Default "chaos".
	Cluster string

	// Duration is how long producers publish and faults are injected in the
	// soak (the drain and the verification come on top). Default 180 s.
	Duration time.Duration
	// DrainTimeout bounds the wait for every group to catch up after the
	// soak. Default 120 s.
	DrainTimeout time.Duration
	// Rate is the producers' total rate in transactions per second (a
	// transaction carries 1 to 8 messages). Default 60.
	Rate float64
	// Producers is the number of producer connections. Default 3.
	Producers int
	// RollbackPercent of producer transactions are deliberately rolled back.
	// Default 10.
	RollbackPercent int

	// Lease of every consumer's pages. Default 3 s.
	Lease time.Duration
	// PageSize is the consumers' max_messages. Default 20.
	PageSize int

	// Restarts is the number of immediate server stops (pg_ctl stop -m
	// immediate + start) during the soak. Default 2.
	Restarts int
	// Terminates is the number of pg_terminate_backend rounds (each
	// terminates up to 3 random consumer backends). Default 6.
	Terminates int
	// Kills is the number of consumer processes SIGKILLed mid-page.
	// Default 6.
	Kills int
	// LeaderKills is the number of times the scheduler leader is SIGKILLed.
	// Default 2.
	LeaderKills int
	// LateAcks is how many pages each hand-written SQL consumer acks only
	// after its lease expired. Default 2.
	LateAcks int
	// Overruns is how many handlers of each client-package worker process
	// run for 1.5 leases (the client extends the lease meanwhile). Default 3.
	Overruns int
	// Stops is the number of client-package workers shut down in the middle
	// of a page (a handler running past the consumer's StopTimeout), then
	// restarted. Default 4.
	Stops int

	// NoRelay replaces the queue's relay consumer (kindRelay: it publishes to
	// the queue inside the transaction of its read, alternately
	// read-then-publish and publish-then-read) with a plain SQL consumer.
	// Default false: the relay runs.
	NoRelay bool
	// NoEvents leaves out the soak's scripted events (events.go: subscribe
	// earliest, pause/resume, seek, replay, alter_topic raising P).
	// Default false: they run.
	NoEvents bool

	// LongTx is how long the long-transaction scenario holds its xid.
	// Default 2 minutes.
	LongTx time.Duration
	// DeadGroupRounds is the number of simulated-clock rounds (each 2
	// minutes of simulated time, one partition) of the dead-group scenario.
	// Default 12.
	DeadGroupRounds int
	// FailoverPhase is how long the failover scenarios run before and after
	// the promotion. Default 15 s.
	FailoverPhase time.Duration

	// Scenarios to run, in order, from soak, longtx, deadgroup,
	// failover-sync, failover-async. Default: all of them.
	Scenarios []string

	// Exe is the executable re-executed as a worker (it must call
	// chaos.WorkerMain when PGQ_CHAOS_WORKER is set). Default: os.Executable.
	Exe string
	// SchedulerBin is the pgq-scheduler binary. Default Root/bin/pgq-scheduler.
	SchedulerBin string
	// RunDir receives every record file and log. Default
	// Root/.pgq-dev/chaos-runs/<UTC timestamp>.
	RunDir string
	// Logger receives progress. Default slog.Default() with prefix "chaos".
	Logger *slog.Logger
}

// Defaults of Config, in one place.
const (
	DefaultPort            = 25435
	DefaultFailoverPort    = 25436
	DefaultCluster         = "chaos"
	DefaultDuration        = 180 * time.Second
	DefaultDrainTimeout    = 120 * time.Second
	DefaultRate            = 60
	DefaultProducers       = 3
	DefaultRollbackPercent = 10
	DefaultLease           = 3 * time.Second
	DefaultPageSize        = 20
	DefaultRestarts        = 2
	DefaultTerminates      = 6
	DefaultKills           = 6
	DefaultLeaderKills     = 2
	DefaultLateAcks        = 2
	DefaultOverruns        = 3
	DefaultStops           = 4
	DefaultLongTx          = 2 * time.Minute
	DefaultDeadGroupRounds = 12
	DefaultFailoverPhase   = 15 * time.Second
)

// AllScenarios are the scenario names, in their default order.
var AllScenarios = []string{"soak", "longtx", "deadgroup", "failover-sync", "failover-async"}

func (c Config) withDefaults() (Config, error) {
	var err error
	if c.Root == "" {
		if c.Root, err = repoRoot(); err != nil {
			return c, err
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Port, DefaultPort)
	def(&c.FailoverPort, DefaultFailoverPort)
	def(&c.Producers, DefaultProducers)
	def(&c.RollbackPercent, DefaultRollbackPercent)
	def(&c.PageSize, DefaultPageSize)
	def(&c.Restarts, DefaultRestarts)
	def(&c.Terminates, DefaultTerminates)
	def(&c.Kills, DefaultKills)
	def(&c.LeaderKills, DefaultLeaderKills)
	def(&c.LateAcks, DefaultLateAcks)
	def(&c.Overruns, DefaultOverruns)
	def(&c.Stops, DefaultStops)
	def(&c.DeadGroupRounds, DefaultDeadGroupRounds)
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	durDef := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	durDef(&c.Duration, DefaultDuration)
	durDef(&c.DrainTimeout, DefaultDrainTimeout)
	durDef(&c.Lease, DefaultLease)
	durDef(&c.LongTx, DefaultLongTx)
	durDef(&c.FailoverPhase, DefaultFailoverPhase)
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Rate < 0 || c.RollbackPercent < 0 || c.RollbackPercent > 100 || c.Restarts < 0 || c.Kills < 0 ||
		c.Terminates < 0 || c.LeaderKills < 0 || c.LateAcks < 0 || c.Overruns < 0 || c.Stops < 0 {
		return c, errors.New("chaos: negative rate or fault count, or RollbackPercent outside 0..100")
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	}
	for _, s := range c.Scenarios {
		known := false
		for _, a := range AllScenarios {
			known = known || s == a
		}
		if !known {
			return c, fmt.Errorf("chaos: unknown scenario %q (want one of %v)", s, AllScenarios)
		}
	}
	if c.Exe == "" {
		if c.Exe, err = os.Executable(); err != nil {
			return c, fmt.Errorf("chaos: own executable: %w", err)
		}
	}
	if c.SchedulerBin == "" {
		c.SchedulerBin = filepath.Join(c.Root, "bin", "pgq-scheduler")
	}
	if c.RunDir == "" {
		c.RunDir = filepath.Join(c.Root, ".pgq-dev", "chaos-runs", time.Now().UTC().Format("20060102T150405"))
	}
	if err := os.MkdirAll(c.RunDir, 0o755); err != nil {
		return c, fmt.Errorf("chaos: run folder: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("prefix", "chaos")
	return c, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chaos: go.mod not found above the working directory")
		}
		dir = parent
	}
}
