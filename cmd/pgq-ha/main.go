// Command pgq-ha is make ha: pgq under Patroni (deploy/ha, docs/ha.md). A
// test harness like pgq-chaos, not part of the production binary: it starts
// etcd and three Patroni nodes on loopback, two pgq-scheduler sidecars and
// the chaos producers and consumers on a three-host URL, scripts a
// switchover, a crash of the leader and a switch back, and ends with one
// line:
//
//	ha: L lost, B bad duplicates, R rolled-back delivered, write gap S1 s (switchover) / S2 s (crash), leader gap G s
//
// exiting non-zero unless L, B and R are 0, S1 ≤ 10, S2 ≤ 30, G ≤ the
// sidecars' leader TTL + 5 s and nothing else failed.
//
//	pgq-ha [-manager patroni|pgaf] [-seconds N] [-base-port P] [-rate R] [-no-async]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pgfanout/pgq/internal/chaos"
)

func main() {
	if chaos.IsWorker() {
		chaos.WorkerMain()
		return
	}
	var cfg chaos.HAConfig
	var seconds int
	flag.IntVar(&seconds, "seconds", 0, "length of the scripted run (env HA_SECONDS; default 300: switchover at 20 %, crash at 50 %, switch back at 80 %)")
	flag.IntVar(&cfg.BasePort, "base-port", 0, "first port: etcd +0/+1, PostgreSQL +10..+12, Patroni REST +20..+22 (default 36100)")
	flag.Float64Var(&cfg.Rate, "rate", 0, "producer transactions per second (default 30)")
	flag.StringVar(&cfg.Manager, "manager", "patroni", "HA manager: patroni (etcd + Patroni) or pgaf (pg_auto_failover)")
	flag.BoolVar(&cfg.NoAsync, "no-async", false, "leave out the asynchronous variant (stale ack after a failover that lost a page)")
	flag.StringVar(&cfg.SchedulerBin, "scheduler", "", "pgq-scheduler binary (default bin/pgq-scheduler)")
	flag.Parse()
	if seconds == 0 {
		if s := os.Getenv("HA_SECONDS"); s != "" {
			if _, err := fmt.Sscan(s, &seconds); err != nil {
				fmt.Fprintln(os.Stderr, "pgq-ha: HA_SECONDS must be a number of seconds")
				os.Exit(2)
			}
		}
	}
	cfg.Duration = time.Duration(seconds) * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := chaos.RunHA(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgq-ha:", err)
		sum.Problems = append(sum.Problems, err.Error())
	}
	fmt.Println(sum.Line())
	if !sum.OK() {
		os.Exit(1)
	}
}
