package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A backlog of 1,000,000 messages drains in bounded pages: every read is an
// index scan that stops after max_messages rows (docs/architecture.md, "The read path"), so no page is
// over 100, every message arrives exactly once, and the slowest read call is
// logged (no timed assertion on a shared machine).
func TestQueueBacklogMillion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const total, batch, page = 1_000_000, 10_000, 100
	topic := "backlog"
	topicID := b.createTopic(t, b.Pool, topic)

	// Publish with publish_batch, 10,000 payloads per call, 2 producers.
	start := time.Now()
	var maxID int64
	errs := make(chan error, 2)
	for p := 0; p < 2; p++ {
		go func(p int) {
			conn := b.Conn(t)
			for i := p; i < total/batch; i += 2 {
				var n, hi int64
				err := conn.QueryRow(b.ctx,
					`SELECT count(*), max(id) FROM fanout.publish_batch($1,
					     ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($2::int, $3::int) g ORDER BY g)) AS id`,
					topic, i*batch, (i+1)*batch-1).Scan(&n, &hi)
				if err == nil && n != batch {
					err = fmt.Errorf("publish_batch returned %d ids, want %d", n, batch)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(p)
	}
	for p := 0; p < 2; p++ {
		require.NoError(t, <-errs)
	}
	require.NoError(t, b.Pool.QueryRow(b.ctx, fmt.Sprintf("SELECT max(id) FROM fanout_data.m%d", topicID)).Scan(&maxID))
	t.Logf("published %d messages in %v", total, time.Since(start))

	// Drain in pages of 100: read, then ack the page.
	conn := b.Conn(t)
	seen := make([]bool, maxID+1)
	delivered := 0
	var maxRead, sumRead time.Duration
	reads := 0
	start = time.Now()
	for {
		t0 := time.Now()
		ms := b.read(t, conn, topic, nil, "drain", page, "5 minutes")
		d := time.Since(t0)
		reads++
		sumRead += d
		if d > maxRead {
			maxRead = d
		}
		if len(ms) == 0 {
			break
		}
		require.LessOrEqual(t, len(ms), page, "no page is over max_messages")
		for _, m := range ms {
			require.False(t, seen[m.MessageID], "a message was delivered twice")
			seen[m.MessageID] = true
		}
		delivered += len(ms)
		require.Equal(t, len(ms), b.ack(t, conn, ms[0].LeaseID, nil))
	}
	t.Logf("drained %d messages in %d reads in %v: max read call %v, mean %v",
		delivered, reads, time.Since(start), maxRead, sumRead/time.Duration(reads))
	require.Equal(t, total, delivered, "every message delivered")
}
