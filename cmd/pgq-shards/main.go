// Command pgq-shards administers pgq beyond one primary
// (docs/scaling-out.md): the shard directory, the PL/Proxy schema, shard
// registration and placements; and `bench`, the measurement of `make shards`.
//
//	pgq-shards migrate-directory --directory-url URL
//	pgq-shards migrate-proxy     --directory-url URL
//	pgq-shards add-shard         --directory-url URL NAME CONNINFO
//	pgq-shards place             --directory-url URL PATTERN SHARD
//	pgq-shards move              --directory-url URL TOPIC SHARD
//	pgq-shards finish-move       --directory-url URL TOPIC
//	pgq-shards mirror            --from URL --to URL --topic TOPIC --group GROUP [--target-topic T]
//	                             [--consumer NAME] [--lease 30s] [--max-messages 100]
//	pgq-shards bench             (flags: pgq-shards bench -h; run by scripts/shards.sh)
//
// --directory-url defaults to PGQ_DIRECTORY_URL. The shard itself is a pgq
// database migrated as usual (pgq-scheduler migrate); CONNINFO is in
// key=value form (PL/Proxy connects with it too), without a password.
//
// mirror copies a topic of one pgq database (--from, $PGQ_MIRROR_FROM) into
// a topic of another (--to, $PGQ_MIRROR_TO) through its own consumer group,
// with dedupe_key = the source id, acking after the target commits
// (shards.Mirror); it runs until SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/shards"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgq-shards: "+err.Error())
		os.Exit(1)
	}
}

const usage = `usage:
  pgq-shards migrate-directory --directory-url URL
  pgq-shards migrate-proxy     --directory-url URL
  pgq-shards add-shard         --directory-url URL NAME CONNINFO
  pgq-shards place             --directory-url URL PATTERN SHARD
  pgq-shards move              --directory-url URL TOPIC SHARD   (drain-and-switch, traffic running)
  pgq-shards finish-move       --directory-url URL TOPIC         (ends it once the old shard is drained)
  pgq-shards mirror            --from URL --to URL --topic TOPIC --group GROUP [--target-topic T]
                               [--consumer NAME] [--lease 30s] [--max-messages 100]   (until SIGTERM)
  pgq-shards bench             [flags]   (make shards)`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, args := args[0], args[1:]
	if cmd == "bench" {
		return runBench(ctx, args, stdout, stderr)
	}
	if cmd == "mirror" {
		return runMirror(ctx, args, stderr)
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dirURL := fs.String("directory-url", os.Getenv("PGQ_DIRECTORY_URL"), "the directory database (default $PGQ_DIRECTORY_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want := map[string]int{"migrate-directory": 0, "migrate-proxy": 0, "add-shard": 2, "place": 2, "move": 2, "finish-move": 1}
	n, ok := want[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if fs.NArg() != n {
		return fmt.Errorf("%s takes %d arguments\n%s", cmd, n, usage)
	}
	if *dirURL == "" {
		return fmt.Errorf("%s: no directory: set --directory-url or PGQ_DIRECTORY_URL", cmd)
	}
	conn, err := pgx.Connect(ctx, *dirURL)
	if err != nil {
		return fmt.Errorf("%s: directory unreachable: %w", cmd, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	switch cmd {
	case "migrate-directory":
		v, err := shards.MigrateDirectory(ctx, conn)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pgq-shards: directory schema at version %d\n", v)
	case "migrate-proxy":
		v, err := shards.MigrateProxy(ctx, conn)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pgq-shards: proxy schema at version %d\n", v)
	case "add-shard":
		idx, err := shards.AddShard(ctx, conn, fs.Arg(0), fs.Arg(1))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pgq-shards: shard %s at proxy index %d\n", fs.Arg(0), idx)
	case "place":
		v, err := shards.Place(ctx, conn, fs.Arg(0), fs.Arg(1))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pgq-shards: %s placed on %s (directory version %d)\n", fs.Arg(0), fs.Arg(1), v)
	case "move":
		if err := shards.Move(ctx, conn, fs.Arg(0), fs.Arg(1)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pgq-shards: %s now publishes on %s; its previous shard drains (run finish-move)\n", fs.Arg(0), fs.Arg(1))
	case "finish-move":
		done, err := shards.FinishMove(ctx, conn, fs.Arg(0))
		if err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("finish-move %s: %w; try again later", fs.Arg(0), shards.ErrStillDraining)
		}
		fmt.Fprintf(stdout, "pgq-shards: the move of %s is over\n", fs.Arg(0))
	}
	return nil
}

func runMirror(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mirror", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", os.Getenv("PGQ_MIRROR_FROM"), "the source pgq database (default $PGQ_MIRROR_FROM)")
	to := fs.String("to", os.Getenv("PGQ_MIRROR_TO"), "the target pgq database (default $PGQ_MIRROR_TO)")
	var cfg shards.MirrorConfig
	fs.StringVar(&cfg.Topic, "topic", "", "source topic")
	fs.StringVar(&cfg.Group, "group", "", "the mirror's consumer group on the source topic (subscribe it first)")
	fs.StringVar(&cfg.TargetTopic, "target-topic", "", "target topic (default: --topic); it must exist")
	fs.StringVar(&cfg.Consumer, "consumer", "", "member name in the group (default mirror-<pid>)")
	fs.DurationVar(&cfg.Lease, "lease", 30*time.Second, "page lease (the target's dedupe_window must exceed twice it)")
	fs.IntVar(&cfg.MaxMessages, "max-messages", 100, "page size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from == "" || *to == "" || cfg.Topic == "" || cfg.Group == "" {
		return fmt.Errorf("mirror: --from, --to, --topic and --group are required\n%s", usage)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	src, err := pgxpool.New(ctx, *from)
	if err != nil {
		return fmt.Errorf("mirror: source: %w", err)
	}
	defer src.Close()
	dst, err := pgxpool.New(ctx, *to)
	if err != nil {
		return fmt.Errorf("mirror: target: %w", err)
	}
	defer dst.Close()
	m, err := shards.NewMirror(ctx, src, dst, cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("mirroring", "topic", cfg.Topic, "group", cfg.Group, "target_topic", cfg.TargetTopic)
	err = m.Run(ctx)
	st := m.Stats()
	cfg.Logger.Info("stopped", "pages", st.Pages, "messages", st.Messages, "failures", st.Failures)
	return err
}
