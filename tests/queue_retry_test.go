package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// qDeadLetter is one row of fanout.dead_letters.
type qDeadLetter struct {
	MessageID int64
	Attempts  int
	LastError *string
	Payload   string
}

func (b *bundle) qDeadLetters(t *testing.T, topic string) []qDeadLetter {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, `
		SELECT message_id, attempts, last_error, payload::text FROM fanout.dead_letters
		WHERE topic = $1 ORDER BY message_id`, topic)
	require.NoError(t, err)
	defer rows.Close()
	var out []qDeadLetter
	for rows.Next() {
		var d qDeadLetter
		require.NoError(t, rows.Scan(&d.MessageID, &d.Attempts, &d.LastError, &d.Payload))
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

// qReadUntil polls read until it returns something (for due retries; the
// callers' retry delays are at most 4 seconds, so a minute means never).
func (b *bundle) qReadUntil(t *testing.T, topic, consumer string, max int) []msg {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if ms := b.read(t, b.Pool, topic, nil, consumer, max, "1 minute"); len(ms) > 0 {
			return ms
		}
		require.True(t, time.Now().Before(deadline), "nothing became readable within a minute")
		time.Sleep(50 * time.Millisecond)
	}
}

// nack with retry_in, exponential backoff (retry_in NULL), max_attempts ->
// dead letters with the last error, replay, purge, and lease expiry counting
// as an attempt.
func TestQueueRetryAndDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("retry_in delays redelivery", func(t *testing.T) {
		topic := "retry.delay"
		b.createTopic(t, b.Pool, topic)
		id := b.publish(t, b.Pool, topic, `{"x":1}`)
		ms := b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
		require.Equal(t, []int64{id}, ids(ms))
		require.Equal(t, 1, b.qNack(t, b.Pool, ms[0].LeaseID, nil, ptr("1 hour"), "later"))
		require.Empty(t, b.read(t, b.Pool, topic, nil, "w", 10, "1 minute"), "not due for an hour")
		require.Equal(t, 0, b.qNack(t, b.Pool, ms[0].LeaseID, nil, ptr("0"), "again"), "nack is idempotent")

		id2 := b.publish(t, b.Pool, topic, `{"x":2}`)
		ms = b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
		require.Equal(t, []int64{id2}, ids(ms))
		require.Equal(t, 1, b.qNack(t, b.Pool, ms[0].LeaseID, nil, ptr("1 second"), "soon"))
		ms = b.qReadUntil(t, topic, "w", 10)
		require.Equal(t, []int64{id2}, ids(ms), "due after retry_in")
		require.Equal(t, int32(2), ms[0].Attempt)
		require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
	})

	t.Run("NULL retry_in backs off exponentially", func(t *testing.T) {
		topic := "retry.backoff"
		b.createTopic(t, b.Pool, topic, "max_attempts => 10")
		id := b.publish(t, b.Pool, topic, `{}`)
		for attempt, want := range []float64{1, 2, 4} {
			var ms []msg
			if attempt == 0 {
				ms = b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
			} else {
				ms = b.qReadUntil(t, topic, "w", 10)
			}
			require.Equal(t, []int64{id}, ids(ms))
			require.Equal(t, int32(attempt+1), ms[0].Attempt)
			tx, err := b.Pool.Begin(b.ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(b.ctx) })
			require.Equal(t, 1, b.qNack(t, tx, ms[0].LeaseID, nil, nil, "backoff"))
			// Not readable right away (same transaction: no clock race).
			require.Empty(t, b.read(t, tx, topic, nil, "w", 10, "1 minute"))
			var delay float64
			require.NoError(t, tx.QueryRow(b.ctx, `
				SELECT extract(epoch FROM r.not_before - l.closed_at)::float8
				FROM fanout.retry r JOIN fanout.lease l ON l.group_id = r.group_id
				WHERE r.message_id = $1 AND l.lease_id = fanout._lease_raw($2)`,
				id, ms[0].LeaseID).Scan(&delay))
			require.InDelta(t, want, delay, 0.001, "backoff after attempt %d", attempt+1)
			require.NoError(t, tx.Commit(b.ctx))
		}
	})

	t.Run("max_attempts dead-letters, replay and purge", func(t *testing.T) {
		topic := "retry.dlq"
		b.createTopic(t, b.Pool, topic, "max_attempts => 3")
		id := b.publish(t, b.Pool, topic, `{"order":7}`)
		other := b.publish(t, b.Pool, topic, `{"order":8}`)
		for attempt := 1; attempt <= 3; attempt++ {
			ms := b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
			if attempt == 1 {
				require.Equal(t, []int64{id, other}, ids(ms))
				require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, []int64{other}))
			} else {
				require.Equal(t, []int64{id}, ids(ms))
			}
			require.Equal(t, int32(attempt), ms[0].Attempt)
			require.Empty(t, b.qDeadLetters(t, topic))
			require.Equal(t, 1, b.qNack(t, b.Pool, ms[0].LeaseID, []int64{id}, ptr("0"),
				"boom "+string(rune('0'+attempt))))
		}
		require.Empty(t, b.read(t, b.Pool, topic, nil, "w", 10, "1 minute"), "dead letters are not delivered")
		dl := b.qDeadLetters(t, topic)
		require.Len(t, dl, 1)
		require.Equal(t, id, dl[0].MessageID)
		require.Equal(t, 3, dl[0].Attempts)
		require.Equal(t, "boom 3", *dl[0].LastError, "the last error is kept")
		require.JSONEq(t, `{"order":7}`, dl[0].Payload)

		// Replay: readable again, as a new delivery.
		var n int
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.replay_dead_letters($1, NULL, $2)",
			topic, []int64{id}).Scan(&n))
		require.Equal(t, 1, n)
		require.Empty(t, b.qDeadLetters(t, topic))
		ms := b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
		require.Equal(t, []int64{id}, ids(ms))
		require.Equal(t, int32(1), ms[0].Attempt)
		require.JSONEq(t, `{"order":7}`, string(ms[0].Payload))
		require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
		// Replaying it again: no longer a dead letter.
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.replay_dead_letters($1, NULL, $2)", topic, []int64{id})
		requireSQLState(t, err, "PGQ20")

		// Purge: only dead letters older than older_than go.
		ids2 := b.qPublishN(t, b.Pool, topic, 0, 2)
		for attempt := 1; attempt <= 3; attempt++ {
			ms := b.read(t, b.Pool, topic, nil, "w", 10, "1 minute")
			require.Equal(t, ids2, ids(ms))
			require.Equal(t, 2, b.qNack(t, b.Pool, ms[0].LeaseID, nil, ptr("0"), "bad"))
		}
		require.Len(t, b.qDeadLetters(t, topic), 2)
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.purge_dead_letters($1, NULL, '1 hour')", topic).Scan(&n))
		require.Equal(t, 0, n)
		require.Len(t, b.qDeadLetters(t, topic), 2)
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.purge_dead_letters($1, NULL, '0')", topic).Scan(&n))
		require.Equal(t, 2, n)
		require.Empty(t, b.qDeadLetters(t, topic))
		require.Empty(t, b.read(t, b.Pool, topic, nil, "w", 10, "1 minute"))
	})

	t.Run("lease expiry counts as an attempt and can dead-letter", func(t *testing.T) {
		topic := "retry.expiry"
		b.createTopic(t, b.Pool, topic, "max_attempts => 2")
		id := b.publish(t, b.Pool, topic, `{}`)
		ms := b.read(t, b.Pool, topic, nil, "w", 10, "1 second")
		require.Equal(t, int32(1), ms[0].Attempt)
		b.qWaitExpired(t, ms[0].LeaseID)
		ms = b.read(t, b.Pool, topic, nil, "w", 10, "1 second")
		require.Equal(t, []int64{id}, ids(ms))
		require.Equal(t, int32(2), ms[0].Attempt)
		b.qWaitExpired(t, ms[0].LeaseID)
		require.Empty(t, b.read(t, b.Pool, topic, nil, "w", 10, "1 minute"), "the third delivery is not made")
		dl := b.qDeadLetters(t, topic)
		require.Len(t, dl, 1)
		require.Equal(t, id, dl[0].MessageID)
		require.Equal(t, 2, dl[0].Attempts)
		require.NotNil(t, dl[0].LastError)
		require.Contains(t, *dl[0].LastError, "expired")
		// The expired lease is fenced: its messages were settled by dead-lettering.
		_, err := b.Pool.Exec(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID)
		requireSQLState(t, err, "PGQ11")
	})
}
