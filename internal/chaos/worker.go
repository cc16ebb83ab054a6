package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

// WorkerEnv is the environment variable that turns the chaos executable into
// a consumer worker; it holds the worker's spec as JSON.
const WorkerEnv = "PGQ_CHAOS_WORKER"

// Worker kinds.
const (
	kindSQL      = "sql"       // hand-written: fanout.read, record, fanout.ack
	kindClient   = "client"    // client.NewConsumer (page acks, pipelined with the next read)
	kindClientTx = "client-tx" // client.NewTxConsumer (one transaction per message, ack inside)
	// kindRelay is a hand-written consumer of a queue that also publishes to
	// that queue in the transaction of its read: alternately read-then-publish
	// and publish-then-read (consume-transform-produce). It publishes only
	// while it sees producer keys, so the derived keys die out in the drain.
	kindRelay = "relay"
)

// workerSpec is one consumer process.
type workerSpec struct {
	Name     string        `json:"name"`
	Kind     string        `json:"kind"`
	URL      string        `json:"url"`
	Topic    string        `json:"topic"`
	Group    string        `json:"group"` // "" on the queue topic
	Page     int           `json:"page"`
	Lease    time.Duration `json:"lease"`
	LateAcks int           `json:"late_acks"` // SQL workers: pages acked only after the lease expired
	// Overruns: client workers: handlers that run for 1.5 leases (the
	// client must keep the lease meanwhile).
	Overruns int    `json:"overruns"`
	RunDir   string `json:"run_dir"`
}

func (s workerSpec) groupLabel() string {
	if s.Group == "" {
		return "queue"
	}
	return s.Group
}

// IsWorker reports whether this process was started as a chaos worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerMain runs the worker described by PGQ_CHAOS_WORKER and exits.
// SIGTERM stops it gracefully; SIGUSR1 arms a SIGKILL of itself at the next
// point where it holds a page that it recorded but did not ack (mid-page);
// SIGUSR2 (client workers) arms a graceful stop from inside the next
// handler, which then runs past the consumer's StopTimeout (a shutdown
// mid-page), or a plain stop when no handler runs within 3 s.
func WorkerMain() {
	var spec workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker: bad spec:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("prefix", "chaos worker", "worker", spec.Name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	w := &worker{spec: spec, log: log, stopRun: stopRun}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			w.armed.Store(true)
		}
	}()
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		for range usr2 {
			w.stopArmed.Store(true)
			time.AfterFunc(3*time.Second, stopRun) // no handler ran: a plain stop
		}
	}()
	if err := w.run(ctx); err != nil {
		log.Error("worker failed", "error", err)
		os.Exit(1)
	}
}

type worker struct {
	spec      workerSpec
	log       *slog.Logger
	rec       *recorder
	armed     atomic.Bool
	stopArmed atomic.Bool
	stopRun   context.CancelFunc // cancels the context the worker runs with
}

// midPage is called while the worker holds a recorded, un-acked page of
// lease.
func (w *worker) midPage(lease int64) {
	if w.armed.Load() {
		_ = w.rec.write(line("K", w.spec.Name, lease))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
}

func (w *worker) run(ctx context.Context) error {
	var err error
	w.rec, err = newRecorder(filepath.Join(w.spec.RunDir, fmt.Sprintf("w-%s-%d.rec", w.spec.Name, os.Getpid())))
	if err != nil {
		return err
	}
	defer w.rec.Close()
	consumer := fmt.Sprintf("%s-%d", w.spec.Name, os.Getpid())
	switch w.spec.Kind {
	case kindSQL, kindRelay:
		return w.runSQL(ctx, consumer)
	case kindClient, kindClientTx:
		return w.runClient(ctx, consumer)
	case kindTimed, kindExplicit:
		return w.runTimed(ctx, consumer)
	}
	return fmt.Errorf("unknown worker kind %q", w.spec.Kind)
}

func (w *worker) connConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(w.spec.URL)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 3 * time.Second
	cfg.RuntimeParams["application_name"] = "chaos-w-" + w.spec.Name
	return cfg, nil
}

func (w *worker) deliveryLine(id int64, payload []byte, attempt int, lease int64, consumer string) string {
	var p struct {
		K string `json:"k"`
	}
	_ = json.Unmarshal(payload, &p)
	return line("D", w.spec.groupLabel(), w.spec.Topic, id, p.K, attempt, lease, consumer, time.Now().UnixNano())
}

// runSQL is the hand-written consumer: read a page in its own transaction,
// record it, ack it (sometimes only after the lease expired), record the
// ack's outcome.
func (w *worker) runSQL(ctx context.Context, consumer string) error {
	cfg, err := w.connConfig()
	if err != nil {
		return err
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var group any
	if w.spec.Group != "" {
		group = w.spec.Group
	}
	lateLeft, pages := w.spec.LateAcks, 0
	relay, relayOn, seq := w.spec.Kind == kindRelay, false, 0
	backoff := 100 * time.Millisecond
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		if conn == nil {
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				conn = nil
				w.log.Warn("connect failed", "error", err)
				sleep(backoff)
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
		}
		// Not ctx: a page is finished even when asked to stop.
		bg := context.Background()
		type row struct {
			lease, id int64
			payload   []byte
			attempt   int
		}
		var page []row
		var q interface {
			Query(context.Context, string, ...any) (pgx.Rows, error)
			Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		} = conn
		var tx pgx.Tx
		txn, publishFirst := "", false
		publish := func() error {
			if _, err := tx.Exec(bg, `INSERT INTO chaos.txn VALUES ($1)`, txn); err != nil {
				return err
			}
			_, err := tx.Exec(bg, `SELECT fanout.publish($1, jsonb_build_object('k', $2::text))`, w.spec.Topic, txn+".0")
			return err
		}
		if relay && relayOn {
			seq++
			txn, publishFirst = fmt.Sprintf("r-%s-%d-%d", w.spec.Name, os.Getpid(), seq), seq%2 == 0
			if err := w.rec.write(line("B", txn, w.spec.Topic, 1)); err != nil {
				return err
			}
			if tx, err = conn.Begin(bg); err == nil && publishFirst {
				err = publish()
			}
			q = tx
		}
		if err == nil {
			var rows pgx.Rows
			rows, err = q.Query(bg, `SELECT lease_id, message_id, payload, attempt
				FROM fanout.read($1::text, $2::text, $3::text, $4::int, $5::interval)`,
				w.spec.Topic, group, consumer, w.spec.Page, w.spec.Lease.String())
			if err == nil {
				page, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
					var x row
					return x, r.Scan(&x.lease, &x.id, &x.payload, &x.attempt)
				})
			}
		}
		if tx != nil {
			if err == nil && !publishFirst {
				err = publish()
			}
			if err == nil {
				err = tx.Commit(bg)
			}
			if err != nil {
				_ = tx.Rollback(bg)
				_ = w.rec.write(line("U", txn, err))
			} else if err = w.rec.write(line("C", txn, time.Now().UnixNano())); err != nil {
				return err
			}
		}
		if relay {
			// Relay only while producer keys come by.
			relayOn = false
			for _, m := range page {
				relayOn = relayOn || !bytes.Contains(m.payload, []byte(`"r-`))
			}
		}
		if err != nil {
			w.log.Warn("read failed", "error", err)
			conn.Close(bg)
			conn = nil
			sleep(backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(page) == 0 {
			sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
			continue
		}
		lines := make([]string, len(page))
		for i, m := range page {
			lines[i] = w.deliveryLine(m.id, m.payload, m.attempt, m.lease, consumer)
		}
		lease := page[0].lease
		late, err := w.workPage(lease, lines, &pages, &lateLeft)
		if err != nil {
			return err
		}
		if err := w.ackPage(bg, &conn, lease, late); err != nil {
			return err
		}
	}
	return nil
}

// workPage records a page's deliveries and "works" on it: briefly, or, for
// the late acks the spec asks for (the fifth page, then about one in 40),
// past the lease. It returns whether the page is to be acked late.
func (w *worker) workPage(lease int64, lines []string, pages, lateLeft *int) (bool, error) {
	if err := w.rec.write(lines...); err != nil {
		return false, err
	}
	w.midPage(lease)
	*pages++
	late := *lateLeft > 0 && (*pages == 5 || rand.IntN(40) == 0)
	if late {
		*lateLeft--
		time.Sleep(w.spec.Lease + 500*time.Millisecond) // ack after the lease expired
	} else {
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // "work"
	}
	return late, nil
}

// ackPage acks a whole page and records the outcome (an A line: ok, the
// SQLSTATE, or the error; " late" when acked after the lease expired). A
// connection error closes conn: the caller reconnects.
func (w *worker) ackPage(ctx context.Context, conn **pgx.Conn, lease int64, late bool) error {
	_, err := (*conn).Exec(ctx, `SELECT fanout.ack($1::bigint, NULL::bigint[])`, lease)
	outcome := "ok"
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			outcome = pe.Code
		} else {
			outcome = "error: " + err.Error()
			(*conn).Close(ctx)
			*conn = nil
		}
	}
	if late {
		outcome += " late"
	}
	return w.rec.write(line("A", lease, outcome))
}

// clientStopTimeout is the client workers' Config.StopTimeout: a handler
// that stops the worker mid-page runs past it. clientMaxErrorBackoff is
// their Config.MaxErrorBackoff.
const (
	clientStopTimeout     = time.Second
	clientMaxErrorBackoff = 500 * time.Millisecond
)

// runClient consumes with the client package. Its handler records the
// delivery; some handlers run for 1.5 leases (spec.Overruns: the 20th
// message, then about one in 300), and after SIGUSR2 the next handler stops
// the worker and runs past StopTimeout. What the client does not ack of a
// handled message goes to the fault timeline: F lines from the handler's
// context (lost lease, stop timeout) and from Config.OnAckFailed.
func (w *worker) runClient(ctx context.Context, consumer string) error {
	cc, err := w.connConfig()
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(w.spec.URL)
	if err != nil {
		return err
	}
	pcfg.ConnConfig = cc
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	notAcked := func(lease, id int64, reason string, cause error) {
		_ = w.rec.write(line("F", lease, id, reason, time.Now().UnixNano(), cause))
	}
	cfg := client.Config{Topic: w.spec.Topic, Group: w.spec.Group, Consumer: consumer, MaxMessages: w.spec.Page,
		Lease: w.spec.Lease, PollInterval: 200 * time.Millisecond, MaxErrorBackoff: clientMaxErrorBackoff,
		StopTimeout: clientStopTimeout, Logger: w.log,
		OnAckFailed: func(lease int64, ids []int64, err error) {
			reason := "ackfailed"
			switch {
			case errors.Is(err, client.ErrLeaseLost):
				reason = "lost"
			case errors.Is(err, client.ErrStopTimeout):
				reason = "stopped"
			case w.spec.Kind == kindClientTx:
				// The handler's transaction failed at its ack or commit (a
				// killed backend): rolled back, nothing to retry.
				reason = "txfailed"
			}
			for _, id := range ids {
				notAcked(lease, id, reason, err)
			}
		}}
	overrunsLeft, handled := w.spec.Overruns, 0
	// work holds the message for d, or until the handler's context ends.
	work := func(hctx context.Context, m *client.Delivery, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-hctx.Done():
			cause := context.Cause(hctx)
			reason := "lost"
			if errors.Is(cause, client.ErrStopTimeout) {
				reason = "stopped"
			}
			notAcked(m.LeaseID, m.ID, reason, cause)
			return cause
		}
	}
	handle := func(hctx context.Context, m *client.Delivery) error {
		if err := w.rec.write(w.deliveryLine(m.ID, m.Payload, m.Attempt, m.LeaseID, consumer)); err != nil {
			return err
		}
		w.midPage(m.LeaseID)
		if w.stopArmed.CompareAndSwap(true, false) {
			_ = w.rec.write(line("P", consumer, time.Now().UnixNano()))
			w.stopRun()
			return work(hctx, m, 5*clientStopTimeout)
		}
		handled++
		if overrunsLeft > 0 && (handled == 20 || rand.IntN(300) == 0) {
			overrunsLeft--
			_ = w.rec.write(line("O", m.LeaseID, m.ID, time.Now().UnixNano()))
			return work(hctx, m, w.spec.Lease*3/2)
		}
		return nil
	}
	var c *client.Consumer
	if w.spec.Kind == kindClientTx {
		c, err = client.NewTxConsumer(pool, cfg, func(ctx context.Context, tx pgx.Tx, d *client.Delivery) error {
			return handle(ctx, d)
		})
	} else {
		c, err = client.NewConsumer(pool, cfg, handle)
	}
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
