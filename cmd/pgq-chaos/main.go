// Command pgq-chaos is pgq's fault-injection soak (make chaos). It is a test
// harness, not part of the production binary: it starts its own throwaway
// PostgreSQL clusters (scripts/devdb.sh), re-executes itself as consumer
// workers, and ends with one line:
//
//	chaos: L lost, B bad duplicates, R rolled-back delivered, O out of order, E early
//
// exiting non-zero unless all five are 0 and every scenario ran clean.
//
//	pgq-chaos [-seconds N] [-scenarios soak,longtx,deadgroup,failover-sync,failover-async,move] [-port P] [-failover-port P] [-move-port P]
//
// The move scenario (move.go, last) moves a topic between two shard
// clusters of its own (-move-port and the next) under traffic with crashes;
// its lost messages and its deliveries after an ack count in the line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pgfanout/pgq/internal/chaos"
)

func main() {
	if chaos.IsWorker() {
		chaos.WorkerMain()
		return
	}
	var cfg chaos.Config
	var seconds, longTx int
	var scenarios string
	var movePort int
	flag.IntVar(&seconds, "seconds", 0, "soak duration in seconds (env CHAOS_SECONDS; default 180; long mode: 1800)")
	flag.IntVar(&longTx, "long-tx-seconds", 0, "how long the long transaction holds its xid (default 120)")
	flag.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios (default: all of "+strings.Join(chaos.AllScenarios, ",")+","+moveScenario+")")
	flag.IntVar(&movePort, "move-port", 25470, "port of the move scenario's first shard cluster; the second takes the next one")
	flag.IntVar(&cfg.Port, "port", 0, "port of the soak cluster (default 25435)")
	flag.StringVar(&cfg.Cluster, "cluster", "", "name of the soak cluster under .pgq-dev (default chaos)")
	flag.IntVar(&cfg.FailoverPort, "failover-port", 0, "port of the failover primary; the standby takes the next one (default 25436)")
	flag.Float64Var(&cfg.Rate, "rate", 0, "producer transactions per second (default 60)")
	flag.IntVar(&cfg.Restarts, "restarts", 0, "immediate server stops during the soak (default 2)")
	flag.IntVar(&cfg.Kills, "kills", 0, "consumer processes SIGKILLed during the soak (default 6)")
	flag.IntVar(&cfg.Stops, "stops", 0, "client workers shut down mid-page during the soak (default 4)")
	flag.IntVar(&cfg.Overruns, "overruns", 0, "handlers per client worker process that run for 1.5 leases (default 3)")
	flag.BoolVar(&cfg.NoRelay, "no-relay", false, "no relay consumer (read and publish in one transaction) on the queue")
	flag.BoolVar(&cfg.NoEvents, "no-events", false, "no scripted events (subscribe earliest, pause/resume, seek, replay, alter_topic) in the soak")
	flag.StringVar(&cfg.SchedulerBin, "scheduler", "", "pgq-scheduler binary (default bin/pgq-scheduler)")
	flag.Parse()
	if seconds == 0 {
		if s := os.Getenv("CHAOS_SECONDS"); s != "" {
			if _, err := fmt.Sscan(s, &seconds); err != nil {
				fmt.Fprintln(os.Stderr, "pgq-chaos: CHAOS_SECONDS must be a number of seconds")
				os.Exit(2)
			}
		}
	}
	cfg.Duration = time.Duration(seconds) * time.Second
	cfg.LongTx = time.Duration(longTx) * time.Second
	rest, move := splitScenarios(scenarios)
	cfg.Scenarios = rest
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var sum chaos.Summary
	var err error
	if scenarios == "" || len(rest) > 0 {
		sum, err = chaos.Run(ctx, cfg, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgq-chaos:", err)
		}
	}
	if move && ctx.Err() == nil {
		root, rerr := checkout()
		if rerr != nil {
			fmt.Fprintln(os.Stderr, "pgq-chaos:", rerr)
			os.Exit(2)
		}
		runMove(ctx, root, movePort, os.Stdout, &sum)
	}
	fmt.Println(sum.Line())
	if err != nil || !sum.OK() {
		os.Exit(1)
	}
}

// checkout is the repository checkout around the working directory (where
// scripts/devdb.sh is).
func checkout() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "devdb.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run pgq-chaos inside the pgq checkout (scripts/devdb.sh not found)")
		}
		dir = parent
	}
}
