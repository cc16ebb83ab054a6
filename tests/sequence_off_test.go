package tests

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// seqPublish publishes one message of aggregate agg with sequence seq.
func (b *bundle) seqPublish(t *testing.T, q querier, topic, agg string, seq int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx,
		"SELECT fanout.publish($1, '{}'::jsonb, message_group => $2, sequence => $3)", topic, agg, seq).Scan(&id))
	return id
}

// seqBookkeeping counts a group's rows in the sequence tables.
func (b *bundle) seqBookkeeping(t *testing.T, topic string) (wait, state, done, lost int) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT (SELECT count(*) FROM fanout.seq_wait x WHERE x.group_id = g.group_id),
		       (SELECT count(*) FROM fanout.seq_state x WHERE x.group_id = g.group_id),
		       (SELECT count(*) FROM fanout.seq_done x WHERE x.group_id = g.group_id),
		       (SELECT count(*) FROM fanout.seq_lost x WHERE x.group_id = g.group_id)
		FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = $1 AND g.group_name = 'g'`, topic).Scan(&wait, &state, &done, &lost))
	return
}

// alter_topic(sequence_ordering => false): the messages parked for their
// turn are handed out by the next read (first delivery: attempt 1), a
// message under a lease stays leased (not handed out again), the
// bookkeeping goes, producers may go on passing sequences (which still
// deduplicate), and the setting cannot be turned back on.
func TestSequenceOrderingTurnedOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "so", "semantics => 'pubsub'", "sequence_ordering => true")
	b.subscribe(t, "so", "g")
	a1 := b.seqPublish(t, b.Pool, "so", "A", 1)
	a2 := b.seqPublish(t, b.Pool, "so", "A", 2)
	a3 := b.seqPublish(t, b.Pool, "so", "A", 3)
	b2 := b.seqPublish(t, b.Pool, "so", "B", 2) // B's sequence 1 never comes

	first := b.read(t, b.Pool, "so", ptr("g"), "c", 100, "1 hour")
	require.Equal(t, []int64{a1}, ids(first), "A's turn: only sequence 1")
	wait, _, _, _ := b.seqBookkeeping(t, "so")
	require.Equal(t, 3, wait, "A2, A3 and B2 are parked")

	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('so', sequence_ordering => false)")
	require.NoError(t, err)
	var ordered bool
	var droppedAt *time.Time
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT sequence_ordering, sequence_dropped_at FROM fanout.topics WHERE topic = 'so'").
		Scan(&ordered, &droppedAt))
	require.False(t, ordered)
	require.NotNil(t, droppedAt)
	var released int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count FROM fanout.event_log
	                                          WHERE topic = 'so' AND kind = 'sequence_ordering_dropped'`).Scan(&released))
	require.Equal(t, int64(3), released)
	wait, state, done, lost := b.seqBookkeeping(t, "so")
	require.Equal(t, [4]int{0, 0, 0, 0}, [4]int{wait, state, done, lost}, "no sequence bookkeeping left")

	second := b.read(t, b.Pool, "so", ptr("g"), "c", 100, "1 hour")
	require.ElementsMatch(t, []int64{a2, a3, b2}, ids(second), "the parked messages, once; A1 stays leased")
	for _, m := range second {
		require.Equal(t, int32(1), m.Attempt, "a parked message was never delivered")
	}
	require.Equal(t, 1, b.ack(t, b.Pool, first[0].LeaseID, ids(first)))
	require.Equal(t, 3, b.ack(t, b.Pool, second[0].LeaseID, ids(second)))

	// Producers that still pass sequences: accepted, deduplicated by
	// (aggregate, sequence), handed out in commit order without waiting.
	b5 := b.seqPublish(t, b.Pool, "so", "B", 5)
	require.Equal(t, b5, b.seqPublish(t, b.Pool, "so", "B", 5), "a repeated sequence returns the first message")
	plain := b.publish(t, b.Pool, "so", `{"plain": true}`)
	rows, err := b.Pool.Query(b.ctx, `SELECT fanout.publish_batch('so', ARRAY['{}', '{}']::jsonb[],
	                                  message_groups => ARRAY['C', 'C'], sequences => ARRAY[9, 3]::bigint[])`)
	require.NoError(t, err)
	batch, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, batch, 2)
	third := b.read(t, b.Pool, "so", ptr("g"), "c", 100, "1 hour")
	require.Equal(t, append([]int64{b5, plain}, batch...), ids(third), "every message, in publish order")
	b.ack(t, b.Pool, third[0].LeaseID, ids(third))
	wait, state, done, lost = b.seqBookkeeping(t, "so")
	require.Equal(t, [4]int{0, 0, 0, 0}, [4]int{wait, state, done, lost})
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish('so', '{}', message_group => 'D', sequence => 0)")
	requireSQLState(t, err, "PGQ03")

	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('so', sequence_ordering => true)")
	requireSQLState(t, err, "PGQ03")
	b.createTopic(t, b.Pool, "plain")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('plain', sequence_ordering => true)")
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.publish('plain', '{}', message_group => 'A', sequence => 1)")
	requireSQLState(t, err, "PGQ23")
}

// A read that looked the topic up while sequence ordering was still on, and
// then waited for its group's row behind the alter_topic that turns it off,
// passes its page through: nothing is parked after the switch (a message
// parked then would wait forever, as no read advances sequences any more).
func TestSequenceOrderingOffRacesRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "sr", "semantics => 'pubsub'", "sequence_ordering => true")
	b.subscribe(t, "sr", "g")
	c2 := b.seqPublish(t, b.Pool, "sr", "C", 2) // would wait for C1

	alter := b.Conn(t)
	tx, err := alter.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = tx.Exec(b.ctx, "SELECT fanout.alter_topic('sr', sequence_ordering => false)")
	require.NoError(t, err)

	reader := b.Conn(t)
	var pid int
	require.NoError(t, reader.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pid))
	got := make(chan []msg, 1)
	fail := make(chan error, 1)
	go func() {
		ms, err := readMsgs(b.ctx, reader, "sr", ptr("g"), "c", 100, "1 hour")
		if err != nil {
			fail <- err
			return
		}
		got <- ms
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.Pool.QueryRow(b.ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')", pid).Scan(&waiting))
		return waiting
	}, time.Minute, 10*time.Millisecond, "the read waits for the group's row")
	require.NoError(t, tx.Commit(b.ctx))
	select {
	case err := <-fail:
		require.NoError(t, err)
	case ms := <-got:
		require.Equal(t, []int64{c2}, ids(ms), "handed out, not parked")
	}
	wait, _, _, _ := b.seqBookkeeping(t, "sr")
	require.Equal(t, 0, wait)
}
