package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfanout/pgq/internal/chaos"
	"github.com/pgfanout/pgq/orchestrator"
	"github.com/pgfanout/pgq/shards"
	"github.com/pgfanout/pgq/shards/movechaos"
)

// The "move" scenario: a topic moved between two shard clusters under
// traffic, the mover killed in its seal and the old shard stopped at once
// mid-move, the move resumed and finished (shards/movechaos). Its clusters
// are chaos-move-a (the directory and the new shard, on -move-port) and
// chaos-move-b (the old shard, on the next port).

const moveScenario = "move"

// splitScenarios takes "move" out of the -scenarios list: the rest is
// internal/chaos's. An empty list is every scenario, the move last.
func splitScenarios(list string) (rest []string, move bool) {
	if list == "" {
		return nil, true
	}
	for _, s := range strings.Split(list, ",") {
		if s == moveScenario {
			move = true
		} else if s != "" {
			rest = append(rest, s)
		}
	}
	return rest, move
}

// devdbCmd runs scripts/devdb.sh and returns its output (a URL for start).
func devdbCmd(ctx context.Context, root string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(root, "scripts", "devdb.sh"), args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("devdb.sh %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("devdb.sh %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// keyValue is the key=value conninfo of database db on the cluster at u
// (the directory's form: PL/Proxy appends user=... to it).
func keyValue(u, db string) (string, error) {
	c, err := pgx.ParseConfig(u)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable", c.Host, c.Port, db, c.User), nil
}

func exec1(ctx context.Context, u string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// runMove sets up the two shards and the directory, runs the scenario and
// adds what its verifier found to sum (lost; deliveries after an ack as
// bad duplicates).
func runMove(ctx context.Context, root string, port int, out io.Writer, sum *chaos.Summary) {
	began := time.Now()
	res, err := moveSetupAndRun(ctx, root, port, out)
	sum.Lost += res.Lost()
	sum.BadDuplicates += res.AfterAck
	for _, g := range res.Groups {
		fmt.Fprintf(out, "move: group %s: published %d, lost %d, duplicates after ack %d, redelivered unacked %d\n",
			g.Group, res.Published, g.Lost, res.AfterAck, g.Duplicates)
	}
	fmt.Fprintf(out, "move: %d pages dropped unacked, %d acks and %d publishes failed on the downed shard\n",
		res.Dropped, res.AckErrors, res.PubErrors)
	for _, v := range res.Violations {
		fmt.Fprintln(out, "move:", v)
	}
	if err == nil && len(res.Groups) != len(movechaos.Groups) {
		err = fmt.Errorf("the verifier counted %d groups, want %d", len(res.Groups), len(movechaos.Groups))
	}
	fmt.Fprintf(out, "%s: took %s\n", moveScenario, time.Since(began).Round(100*time.Millisecond))
	if err != nil {
		sum.Problems = append(sum.Problems, fmt.Sprintf("%s: %v", moveScenario, err))
		fmt.Fprintf(out, "problem: %s: %v\n", moveScenario, err)
	}
}

func moveSetupAndRun(ctx context.Context, root string, port int, out io.Writer) (movechaos.Result, error) {
	const db, dirDB = "pgq_move", "pgq_move_directory"
	names := []string{"chaos-move-a", "chaos-move-b"}
	defer func() {
		for _, n := range names {
			_, _ = devdbCmd(context.WithoutCancel(ctx), root, "stop", n)
		}
	}()
	var urls []string
	for i, n := range names {
		u, err := devdbCmd(ctx, root, "start", n, strconv.Itoa(port+i))
		if err != nil {
			return movechaos.Result{}, err
		}
		urls = append(urls, u)
	}
	conninfo := make([]string, 2)
	for i, u := range urls {
		if err := exec1(ctx, u, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", "CREATE DATABASE "+db); err != nil {
			return movechaos.Result{}, err
		}
		ci, err := keyValue(u, db)
		if err != nil {
			return movechaos.Result{}, err
		}
		if _, err := orchestrator.MigrateURL(ctx, ci); err != nil {
			return movechaos.Result{}, err
		}
		conninfo[i] = ci
	}
	if err := exec1(ctx, urls[0], "DROP DATABASE IF EXISTS "+dirDB+" WITH (FORCE)", "CREATE DATABASE "+dirDB); err != nil {
		return movechaos.Result{}, err
	}
	dirURL, err := keyValue(urls[0], dirDB)
	if err != nil {
		return movechaos.Result{}, err
	}
	dir, err := pgx.Connect(ctx, dirURL)
	if err != nil {
		return movechaos.Result{}, err
	}
	defer dir.Close(context.WithoutCancel(ctx))
	if _, err := shards.MigrateDirectory(ctx, dir); err != nil {
		return movechaos.Result{}, err
	}
	for i, name := range []string{"sa", "sb"} {
		if _, err := shards.AddShard(ctx, dir, name, conninfo[i]); err != nil {
			return movechaos.Result{}, err
		}
	}
	if _, err := shards.Place(ctx, dir, "b.%", "sb"); err != nil {
		return movechaos.Result{}, err
	}
	fmt.Fprintf(out, "move: topic b.chaos from shard sb (%s) to sa (%s) under traffic; the mover killed in its seal, sb stopped at once, the move resumed\n",
		names[1], names[0])
	return movechaos.Run(ctx, movechaos.Config{
		DirectoryURL: dirURL, OldShardURL: conninfo[1], Topic: "b.chaos", To: "sa",
		Crash: func(ctx context.Context) error {
			_, err := devdbCmd(ctx, root, "crash", names[1])
			return err
		},
		Restart: func(ctx context.Context) error {
			_, err := devdbCmd(ctx, root, "start", names[1], strconv.Itoa(port+1))
			return err
		},
	})
}
