// Command pgq-scheduler is pgq's sidecar: it migrates the fanout schema and
// runs its maintenance on cron.
//
//	pgq-scheduler migrate --database-url URL
//	pgq-scheduler run     --database-url URL --listen :9187
//	pgq-scheduler status  --database-url URL
//	pgq-scheduler version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgq/pgq/orchestrator"
)

var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pgq-scheduler:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: pgq-scheduler migrate|run|status|version [--database-url URL] [--listen ADDR]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (env DATABASE_URL)")
	listen := fs.String("listen", ":9187", "address of /healthz and /metrics")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "version":
		fmt.Println("pgq-scheduler", version)
		return nil
	case "migrate":
		if *dbURL == "" {
			return errors.New("migrate: --database-url or DATABASE_URL is required")
		}
		v, err := orchestrator.MigrateURL(ctx, *dbURL)
		if err != nil {
			return err
		}
		fmt.Printf("pgq-scheduler: schema at version %d\n", v)
		return nil
	case "run":
		if *dbURL == "" {
			return errors.New("run: --database-url or DATABASE_URL is required")
		}
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer pool.Close()
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			c, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := pool.Ping(c); err != nil {
				http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("run: %w", err)
		}
		return nil
	default:
		return usage()
	}
}
