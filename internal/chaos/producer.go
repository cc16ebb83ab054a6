package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// producers publish unique keys to a set of topics at a total rate, record
// every transaction's outcome and stop on stop().
type producers struct {
	url      string
	topics   []string
	rate     float64
	n        int
	rollback int
	runDir   string
	log      *slog.Logger

	committed, rolledBack, unknown, messages atomic.Int64
	lastCommit                               atomic.Int64 // unix nanos of the last C record
	cancel                                   context.CancelFunc
	wg                                       sync.WaitGroup
}

func (p *producers) start(ctx context.Context) error {
	ctx, p.cancel = context.WithCancel(ctx)
	for i := range p.n {
		rec, err := newRecorder(filepath.Join(p.runDir, fmt.Sprintf("p%d.rec", i)))
		if err != nil {
			p.cancel()
			return err
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer rec.Close()
			p.loop(ctx, i, rec)
		}()
	}
	return nil
}

func (p *producers) stop() {
	p.cancel()
	p.wg.Wait()
}

func (p *producers) loop(ctx context.Context, i int, rec *recorder) {
	cfg, err := pgx.ParseConfig(p.url)
	if err != nil {
		p.log.Error("producer: bad URL", "error", err)
		return
	}
	cfg.ConnectTimeout = 3 * time.Second
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("chaos-p%d", i)
	interval := time.Duration(float64(time.Second) * float64(p.n) / p.rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if conn == nil {
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				conn = nil
				continue
			}
		}
		txn := fmt.Sprintf("p%d-%d", i, seq)
		topic := p.topics[seq%len(p.topics)]
		kind := rand.IntN(3) // 0 single publish, 1 publish_batch, 2 several publishes
		n := 1
		switch kind {
		case 1:
			n = 2 + rand.IntN(7)
		case 2:
			n = 2 + rand.IntN(2)
		}
		doRollback := rand.IntN(100) < p.rollback
		if err := rec.write(line("B", txn, topic, n)); err != nil {
			p.log.Error("producer: record", "error", err)
			return
		}
		outcome, err := p.txn(conn, txn, topic, kind, n, doRollback)
		switch outcome {
		case 'C':
			p.committed.Add(1)
			p.messages.Add(int64(n))
			now := time.Now().UnixNano()
			p.lastCommit.Store(now)
			err = rec.write(line("C", txn, now))
		case 'R':
			p.rolledBack.Add(1)
			err = rec.write(line("R", txn))
		default:
			p.unknown.Add(1)
			_ = rec.write(line("U", txn, err))
			conn.Close(context.Background())
			conn = nil
			err = nil
		}
		if err != nil {
			p.log.Error("producer: record", "error", err)
			return
		}
	}
}

// txn runs one producer transaction. Not cancelled by the stop: a
// transaction that started finishes.
func (p *producers) txn(conn *pgx.Conn, txn, topic string, kind, n int, rollback bool) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	payload := func(j int) string {
		b, _ := json.Marshal(map[string]string{"k": fmt.Sprintf("%s.%d", txn, j)})
		return string(b)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 'U', err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO chaos.txn VALUES ($1)`, txn); err != nil {
		return 'U', err
	}
	switch kind {
	case 1:
		ps := make([]string, n)
		for j := range n {
			ps[j] = payload(j)
		}
		if _, err := tx.Exec(ctx, `SELECT fanout.publish_batch($1, $2::jsonb[])`, topic, ps); err != nil {
			return 'U', err
		}
	default:
		for j := range n {
			if _, err := tx.Exec(ctx, `SELECT fanout.publish($1, $2::jsonb)`, topic, payload(j)); err != nil {
				return 'U', err
			}
		}
	}
	if rollback {
		if err := tx.Rollback(ctx); err != nil {
			return 'U', err
		}
		return 'R', nil
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return 'U', err
	}
	return 'C', nil
}
