package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Worker kinds of the ordered topics (key partitions, sequences). Both are
// hand-written SQL consumers like kindSQL that also write a T line (the time
// before fanout.ack is sent), so the verifier can tell a successor handed out
// before its predecessor's ack was even sent (early).
const (
	kindTimed = "sql-timed" // fanout.read as the group's member (automatic partitions)
	// kindExplicit reads one key partition at a time with
	// fanout.read(partition => k), k going round 0..P-1 (P read from the
	// topic every few seconds, so alter_topic raising P is followed).
	kindExplicit = "sql-explicit"
)

// runTimed is the consumer loop of kindTimed and kindExplicit: read a page,
// record it, ack it (sometimes only after the lease expired), record the
// ack's outcome.
func (w *worker) runTimed(ctx context.Context, consumer string) error {
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
	explicit := w.spec.Kind == kindExplicit
	parts, part, partsAt := 0, rand.IntN(64), time.Time{}
	lateLeft, pages := w.spec.LateAcks, 0
	backoff := 100 * time.Millisecond
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	idle := 0
	for ctx.Err() == nil {
		// Not ctx: a page is finished even when asked to stop.
		bg := context.Background()
		if conn == nil {
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				conn = nil
				w.log.Warn("connect failed", "error", err)
				sleep(backoff)
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
		}
		err = nil // (the previous page's ack outcome is recorded already)
		var partition any
		if explicit {
			if parts == 0 || time.Since(partsAt) > 3*time.Second {
				err = conn.QueryRow(bg, `SELECT partitions FROM fanout.topic WHERE topic = $1`, w.spec.Topic).Scan(&parts)
				if err == nil && parts < 1 {
					err = errors.New("topic has no key partitions")
				}
				partsAt = time.Now()
			}
			part = (part + 1) % max(parts, 1)
			partition = part
		}
		type row struct {
			lease, id int64
			payload   []byte
			attempt   int
		}
		var page []row
		if err == nil {
			var rows pgx.Rows
			rows, err = conn.Query(bg, `SELECT lease_id, message_id, payload, attempt
				FROM fanout.read($1::text, $2::text, $3::text, $4::int, $5::interval, partition => $6::int)`,
				w.spec.Topic, group, consumer, w.spec.Page, w.spec.Lease.String(), partition)
			if err == nil {
				page, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
					var x row
					return x, r.Scan(&x.lease, &x.id, &x.payload, &x.attempt)
				})
			}
		}
		if err != nil {
			w.log.Warn("read failed", "error", err)
			conn.Close(bg)
			conn = nil
			parts = 0
			sleep(backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(page) == 0 {
			// An explicit reader goes round the partitions before it rests.
			if idle++; !explicit || idle >= parts {
				idle = 0
				sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
			}
			continue
		}
		idle = 0
		lines := make([]string, len(page))
		for i, m := range page {
			lines[i] = w.deliveryLine(m.id, m.payload, m.attempt, m.lease, consumer)
		}
		lease := page[0].lease
		late, err := w.workPage(lease, lines, &pages, &lateLeft)
		if err != nil {
			return err
		}
		if err := w.rec.write(line("T", lease, time.Now().UnixNano())); err != nil {
			return err
		}
		if err := w.ackPage(bg, &conn, lease, late); err != nil {
			return err
		}
	}
	return nil
}
