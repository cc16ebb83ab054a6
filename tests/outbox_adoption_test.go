package tests

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// adoptionBlocks returns docs/outbox-adoption.md's SQL blocks by name
// (```sql adopt-<name>).
func adoptionBlocks(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "outbox-adoption.md"))
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```sql adopt-([a-z]+)\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = m[2]
	}
	for _, want := range []string{"setup", "prepare", "cut", "move", "check", "finish"} {
		require.Contains(t, out, want, "docs/outbox-adoption.md has a sql adopt-%s block", want)
	}
	return out
}

// docs/outbox-adoption.md's runbook, run as written while three writers
// insert into the outbox (some of their transactions roll back) and two
// movers run the backlog step at once (and one move rolls back, as a
// crash would): every committed row the old relay had not completed
// reaches the consumer group exactly once, the completed ones never.
func TestOutboxAdoptionRunbook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sql := adoptionBlocks(t)
	_, err := b.Pool.Exec(b.ctx, sql["setup"])
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.Pool.Exec(context.Background(), `DROP TABLE IF EXISTS outbox, outbox_adoption`) })

	// Before: 300 rows, the old relay completed the first 100.
	var mu sync.Mutex
	committed := map[int64]bool{}
	completed := map[int64]bool{}
	rows, err := b.Pool.Query(b.ctx, `INSERT INTO outbox (topic, payload)
	                                  SELECT 'orders', jsonb_build_object('n', i) FROM generate_series(1, 300) i RETURNING id`)
	require.NoError(t, err)
	before, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	for i, id := range before {
		committed[id] = true
		if i < 100 {
			completed[id] = true
		}
	}
	_, err = b.Pool.Exec(b.ctx, `UPDATE outbox SET status = 'COMPLETED', processed_at = now() WHERE id <= (SELECT min(id) + 99 FROM outbox)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, sql["prepare"])
	require.NoError(t, err)

	// The producers: each transaction inserts 1 to 3 rows, every fifth
	// rolls back.
	stop := make(chan struct{})
	var writers sync.WaitGroup
	writeErr := make(chan error, 3)
	for w := 0; w < 3; w++ {
		conn := b.Conn(t)
		writers.Add(1)
		go func(w int) {
			defer writers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := conn.Begin(b.ctx)
				if err != nil {
					writeErr <- err
					return
				}
				rows, err := tx.Query(b.ctx, `INSERT INTO outbox (topic, payload)
				                               SELECT 'orders', jsonb_build_object('w', $1::int, 'i', $2::int, 'k', k)
				                               FROM generate_series(1, 1 + $2::int % 3) k RETURNING id`, w, i)
				var ids []int64
				if err == nil {
					ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				}
				if err != nil {
					_ = tx.Rollback(b.ctx)
					writeErr <- err
					return
				}
				if i%5 == 4 {
					if err := tx.Rollback(b.ctx); err != nil {
						writeErr <- err
						return
					}
					continue
				}
				if err := tx.Commit(b.ctx); err != nil {
					writeErr <- err
					return
				}
				mu.Lock()
				for _, id := range ids {
					committed[id] = true
				}
				mu.Unlock()
			}
		}(w)
	}
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(committed)
	}
	require.Eventually(t, func() bool { return written() >= 400 }, time.Minute, 5*time.Millisecond, "writers run")

	// The cut-over, retried on its lock_timeout.
	for {
		_, err = b.Pool.Exec(b.ctx, sql["cut"])
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			continue
		}
		require.NoError(t, err)
		break
	}
	atCut := written()
	var backlog int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM outbox_adoption").Scan(&backlog))
	require.GreaterOrEqual(t, backlog, 300, "the 200 pending rows and the writers' rows before the cut")

	// A move that rolls back (a crash) leaves the list as it was.
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	var moved int
	require.NoError(t, tx.QueryRow(b.ctx, sql["move"]).Scan(&moved))
	require.Positive(t, moved)
	require.NoError(t, tx.Rollback(b.ctx))
	var left int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM outbox_adoption").Scan(&left))
	require.Equal(t, backlog, left)

	// Two movers at once, in steps of (at most) 1000, while the writers go on.
	var movers sync.WaitGroup
	total := make(chan int, 2)
	for m := 0; m < 2; m++ {
		conn := b.Conn(t)
		movers.Add(1)
		go func() {
			defer movers.Done()
			sum := 0
			for {
				var n int
				if err := conn.QueryRow(b.ctx, sql["move"]).Scan(&n); err != nil {
					writeErr <- err
					return
				}
				if n == 0 {
					total <- sum
					return
				}
				sum += n
			}
		}()
	}
	movers.Wait()
	close(total)
	sum := 0
	for n := range total {
		sum += n
	}
	require.Equal(t, backlog, sum, "the movers moved the backlog between them")
	require.Eventually(t, func() bool { return written() >= atCut+300 }, time.Minute, 5*time.Millisecond,
		"writers go on after the cut")
	close(stop)
	writers.Wait()
	select {
	case err := <-writeErr:
		require.NoError(t, err)
	default:
	}
	require.NoError(t, b.Pool.QueryRow(b.ctx, sql["check"]).Scan(&left))
	require.Zero(t, left)
	_, err = b.Pool.Exec(b.ctx, sql["finish"])
	require.NoError(t, err)

	// The verifier: what billing receives against what committed.
	got := map[int64]int{}
	adopted := 0
	for {
		ms := b.read(t, b.Pool, "outbox.events", ptr("billing"), "v", 1000, "1 minute")
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			var p struct {
				Op  string `json:"op"`
				New struct {
					ID    int64  `json:"id"`
					Topic string `json:"topic"`
				} `json:"new"`
			}
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			require.Equal(t, "insert", p.Op, "nothing but inserts (status updates change no captured column)")
			require.Equal(t, "orders", p.New.Topic)
			got[p.New.ID]++
			var h map[string]any
			require.NoError(t, json.Unmarshal(m.Headers, &h))
			if h["pgq_adopted"] == true {
				adopted++
			}
		}
		b.ack(t, b.Pool, ms[0].LeaseID, ids(ms))
	}
	lost, dups, extra := 0, 0, 0
	for id := range committed {
		switch {
		case completed[id] && got[id] > 0:
			extra++
		case !completed[id] && got[id] == 0:
			lost++
		}
	}
	for id, n := range got {
		if n > 1 {
			dups += n - 1
		}
		if !committed[id] {
			extra++ // a rolled-back row, or one the relay had completed
		}
	}
	t.Logf("outbox adoption: %d rows committed (%d completed before), backlog %d moved, %d received, lost %d, duplicates %d, unexpected %d",
		len(committed), len(completed), backlog, len(got), lost, dups, extra)
	require.Zero(t, lost, "lost")
	require.Zero(t, dups, "duplicates")
	require.Zero(t, extra, "rows that must not arrive")
	require.Equal(t, backlog, adopted, "the backlog arrives through the move steps")
	require.Equal(t, len(committed)-len(completed), len(got))
}
