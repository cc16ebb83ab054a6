package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Switching a topic's completion mode with live groups:
// alter_topic(completion => 'offset') on a reference topic
// (docs/completion-switch.md).

// switchState reports a topic's mode, whether its switch has finished and
// how many of its groups still have a bit.
func (b *bundle) switchState(t *testing.T, topic string) (completion string, done bool, bits int) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx, `
		SELECT t.completion, t.completion_switch_done_at IS NOT NULL,
		       (SELECT count(*) FROM fanout.consumer_group g WHERE g.topic_id = t.topic_id AND g.bit_no IS NOT NULL)
		FROM fanout.topic t WHERE t.topic = $1`, topic).Scan(&completion, &done, &bits))
	return completion, done, bits
}

// partitionLos lists the lowest id of each partition the topic still has.
func (b *bundle) partitionLos(t *testing.T, topic string) []int64 {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, `SELECT p.lo_id FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
		WHERE t.topic = $1 AND p.truncated_at IS NULL ORDER BY p.lo_id`, topic)
	require.NoError(t, err)
	los, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return los
}

func (b *bundle) relExists(t *testing.T, rel string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT to_regclass($1) IS NOT NULL", "fanout_data."+rel).Scan(&ok))
	return ok
}

// Leases open across the switch are acked after it, a nacked message is
// retried after it, nothing is delivered twice, a new group waits for the
// switch to finish, and cleanup keeps the old partition while a group still
// holds a message there.
func TestCompletionSwitchLeasesAcrossSwitch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "cs_leases"
	b.refTopic(t, topic, "retention => '0'", "zero_subscription_retention => '0'", "partition_interval => '1 minute'")
	b.subscribe(t, topic, "A")
	b.subscribe(t, topic, "B")
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = $1", topic).Scan(&table))
	old := b.publishN(t, topic, 10)

	// A holds a page of 5 under a lease and nacks 2 of the next page; B is done.
	a1 := b.read(t, b.Pool, topic, ptr("A"), "a1", 5, "10 minutes")
	require.Equal(t, old[:5], ids(a1))
	a2 := b.read(t, b.Pool, topic, ptr("A"), "a2", 5, "10 minutes")
	require.Equal(t, old[5:], ids(a2))
	require.Equal(t, 2, b.qNack(t, b.Pool, a2[0].LeaseID, old[5:7], ptr("0 seconds"), "later"))
	require.Equal(t, 3, b.ack(t, b.Pool, a2[0].LeaseID, old[7:]))
	require.Equal(t, old, b.readAck(t, topic, "B"))

	var id int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout.alter_topic($1, completion => 'offset')", topic).Scan(&id))
	c, done, bits := b.switchState(t, topic)
	require.Equal(t, "offset", c)
	require.False(t, done, "maintenance finishes the switch")
	require.Equal(t, 2, bits, "groups keep their bits until it does")
	var mode string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT completion FROM fanout.topics WHERE topic = $1", topic).Scan(&mode))
	require.Equal(t, "offset", mode)
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.subscribe($1, 'C')", topic)
	requireSQLState(t, err, "PGQ28")
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, completion => 'offset')", topic)
	require.NoError(t, err, "the same mode again changes nothing")
	// An upgrade's regeneration while the switch is in progress keeps the
	// completion function the groups' acks still use.
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.regenerate_topics()")
	require.NoError(t, err)

	// New messages; the old lease is acked after the switch; A gets its
	// retries and the new messages, B the new ones, each once.
	fresh := b.publishN(t, topic, 10)
	require.Equal(t, 5, b.ack(t, b.Pool, a1[0].LeaseID, nil), "a lease from before the switch is acked after it")
	ms := b.read(t, b.Pool, topic, ptr("A"), "a3", 100, "10 minutes")
	var retried []int64
	for _, m := range ms {
		if m.Attempt > 1 {
			retried = append(retried, m.MessageID)
		}
	}
	require.Equal(t, old[5:7], retried, "the nacked messages come back after the switch")
	b.ack(t, b.Pool, ms[0].LeaseID, nil)
	got := append(ids(ms), b.readAck(t, topic, "A")...)
	require.ElementsMatch(t, append(append([]int64{}, old[5:7]...), fresh...), got)
	require.Equal(t, fresh, b.readAck(t, topic, "B"))

	// A holds one of the new messages under a lease while the old partition
	// closes: cleanup finishes the switch and then keeps the partition.
	more := b.publishN(t, topic, 3)
	held := b.read(t, b.Pool, topic, ptr("A"), "a4", 1, "10 minutes")
	require.Equal(t, more[:1], ids(held))
	require.Equal(t, more, b.readAck(t, topic, "B"))
	b.rotate(t)
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	c, done, bits = b.switchState(t, topic)
	require.Equal(t, "offset", c)
	require.True(t, done)
	require.Zero(t, bits)
	require.Contains(t, b.partitionLos(t, topic), int64(0), "A still holds a message of the old partition")
	require.True(t, b.relExists(t, table+"_done_p0"))

	// A new group may subscribe now and gets what is published after it.
	b.subscribe(t, topic, "C")
	late := b.publishN(t, topic, 2)
	require.Equal(t, late, b.readAck(t, topic, "C"))

	require.Equal(t, 1, b.ack(t, b.Pool, held[0].LeaseID, nil))
	require.Equal(t, append(append([]int64{}, more[1:]...), late...), b.readAck(t, topic, "A"))
	require.Equal(t, late, b.readAck(t, topic, "B"))
	b.rotate(t)
	for i := 0; i < 3; i++ {
		b.cleanup(t, "2 hours")
	}
	require.NotContains(t, b.partitionLos(t, topic), int64(0), "every group is done with the old partition")
	require.False(t, b.relExists(t, table+"_done_p0"))
	require.Empty(t, queryStrings(t, b.ctx, b.URL, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
	var events []string
	rows, err := b.Pool.Query(b.ctx, `SELECT kind FROM fanout.event_log WHERE topic = $1 AND kind LIKE 'completion%' ORDER BY event_id`, topic)
	require.NoError(t, err)
	events, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"completion_switch_started", "completion_switched"}, events)
}

// A group that died in reference mode (its bit released) and comes back
// after the switch reads on from its position, as in offset mode: the
// messages published while it was dead included, each once.
func TestCompletionSwitchDeadGroupComesBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "cs_dead"
	b.refTopic(t, topic)
	b.subscribe(t, topic, "A", "heartbeat_timeout => '1 day'")
	b.subscribe(t, topic, "C", "heartbeat_timeout => '1 second'", "dead_after_misses => 1")
	first := b.publishN(t, topic, 3)
	require.Equal(t, first, b.readAck(t, topic, "A"))
	require.Equal(t, first, b.readAck(t, topic, "C"))
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout._detect_dead_groups(p_now => now() + interval '1 minute')")
	require.NoError(t, err)
	require.Equal(t, "dead", b.groupStatus(t, topic, "C"))
	require.Equal(t, "active", b.groupStatus(t, topic, "A"))
	b.runJobs(t) // its release
	whileDead := b.publishN(t, topic, 4)
	req, _, _ := b.bits(t, topic, whileDead[0])
	require.Equal(t, []string{"A"}, req, "a dead group is not required")

	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic($1, completion => 'offset')", topic)
	require.NoError(t, err)
	b.cleanup(t, "2 hours")
	b.cleanup(t, "2 hours")
	_, done, bits := b.switchState(t, topic)
	require.True(t, done)
	require.Zero(t, bits)
	require.Zero(t, b.runJobs(t), "no bitmap job after the switch")

	after := b.publishN(t, topic, 2)
	require.Equal(t, append(append([]int64{}, whileDead...), after...), b.readAck(t, topic, "A"))
	// The read brings C back; it continues from its position.
	require.Equal(t, append(append([]int64{}, whileDead...), after...), b.readAck(t, topic, "C"))
	require.Equal(t, "active", b.groupStatus(t, topic, "C"))
	require.Zero(t, b.runJobs(t), "no backfill on a switched topic")
}

// Refused and no-op transitions, with their codes (docs/errors.md).
func TestCompletionSwitchRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := func(sql string, args ...any) error {
		_, err := b.Pool.Exec(b.ctx, sql, args...)
		return err
	}
	b.createTopic(t, b.Pool, "cs_queue")
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_queue', completion => 'reference')"), "PGQ03")
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_queue', completion => 'offset')"))
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_queue', completion => 'bitmap')"), "PGQ03")
	b.createTopic(t, b.Pool, "cs_offset", "semantics => 'pubsub'")
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_offset', completion => 'OFFSET_WATERMARK')"))
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_nope', completion => 'offset')"), "PGQ01")

	// A backfill under way: refused until it has finished.
	b.refTopic(t, "cs_fill")
	b.subscribe(t, "cs_fill", "A")
	b.publishN(t, "cs_fill", 5)
	b.subscribe(t, "cs_fill", "B", "start_position => 'earliest'")
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_fill', completion => 'offset')"), "PGQ28")
	c, _, _ := b.switchState(t, "cs_fill")
	require.Equal(t, "reference", c, "nothing changed")
	b.runJobs(t)
	require.NoError(t, exec("SELECT fanout.alter_topic('cs_fill', completion => 'offset')"))
	// Back to reference only once this switch has finished
	// (TestCompletionSwitchToReferenceRefusals).
	requireSQLState(t, exec("SELECT fanout.alter_topic('cs_fill', completion => 'reference')"), "PGQ28")
	// B's backfilled history and A's stream, each once.
	got := b.readAck(t, "cs_fill", "B")
	require.Len(t, got, 5)
	require.Len(t, b.readAck(t, "cs_fill", "A"), 5)
}

// Both sides of the switch under traffic: publishers and consumers on
// their own connections, random nacks, maintenance running, the switch in
// the middle. Every group acks every committed message exactly once.
func TestCompletionSwitchUnderTraffic(t *testing.T) {
	t.Parallel()
	t.Run("unpartitioned", func(t *testing.T) { switchUnderTraffic(t, "offset") })
	// Key partitions: members own partitions, reads go through their cursors.
	t.Run("key_partitions", func(t *testing.T) { switchUnderTraffic(t, "offset", "partitions => 4") })
}

// switchUnderTraffic switches a topic to completion to (from the other
// mode) with publishers, consumers and maintenance running.
func switchUnderTraffic(t *testing.T, to string, opts ...string) {
	b := setup(t)
	const topic = "cs_traffic"
	groups := []string{"g1", "g2", "g3"}
	from := "reference"
	if to == "reference" {
		from = "offset"
	}
	b.createTopic(t, b.Pool, topic, append([]string{"semantics => 'pubsub'", "completion => '" + from + "'",
		"retention => '0'", "zero_subscription_retention => '0'", "partition_interval => '1 minute'"}, opts...)...)
	for _, g := range groups {
		b.subscribe(t, topic, g)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 4*time.Minute)
	defer cancel()
	errs := make(chan error, 64)
	var consCtxErr func() error // set below: consumers' errors after they are stopped are not failures
	report := func(err error) {
		if ctx.Err() == nil && (consCtxErr == nil || consCtxErr() == nil) {
			select {
			case errs <- err:
			default:
			}
		}
	}

	// Publishers: each batch's ids count once its transaction committed.
	var pubMu sync.Mutex
	var committed []int64
	var published atomic.Int64
	stopPub := make(chan struct{})
	var pubWG sync.WaitGroup
	for p := 0; p < 2; p++ {
		pubWG.Add(1)
		go func(p int) {
			defer pubWG.Done()
			for i := 0; ; i++ {
				select {
				case <-stopPub:
					return
				default:
				}
				tx, err := b.Pool.Begin(ctx)
				if err != nil {
					report(err)
					return
				}
				var got []int64
				for k := 0; k < 3; k++ {
					var id int64
					if err := tx.QueryRow(ctx, "SELECT fanout.publish($1, $2::jsonb, message_group => $3)", topic,
						fmt.Sprintf(`{"p":%d,"i":%d,"k":%d}`, p, i, k), fmt.Sprintf("key-%d", (i+k)%5)).Scan(&id); err != nil {
						_ = tx.Rollback(ctx)
						report(fmt.Errorf("publish: %w", err))
						return
					}
					got = append(got, id)
				}
				if i%7 == 3 {
					_ = tx.Rollback(ctx) // never delivered
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					report(fmt.Errorf("commit: %w", err))
					return
				}
				pubMu.Lock()
				committed = append(committed, got...)
				pubMu.Unlock()
				published.Add(int64(len(got)))
			}
		}(p)
	}

	// Consumers: two per group; acks are counted per group and id.
	type glog struct {
		mu     sync.Mutex
		acked  map[int64]int
		nacked int
	}
	logs := map[string]*glog{}
	for _, g := range groups {
		logs[g] = &glog{acked: map[int64]int{}}
	}
	consCtx, stopCons := context.WithCancel(ctx)
	defer stopCons()
	consCtxErr = consCtx.Err
	var consWG sync.WaitGroup
	for _, g := range groups {
		for m := 0; m < 2; m++ {
			consWG.Add(1)
			go func(g string, m int) {
				defer consWG.Done()
				rnd := rand.New(rand.NewSource(int64(len(g)*10 + m)))
				gl := logs[g]
				for consCtx.Err() == nil {
					ms, err := readMsgs(consCtx, b.Pool, topic, ptr(g), fmt.Sprintf("%s-%d", g, m), 20, "30 seconds")
					if err != nil {
						report(fmt.Errorf("%s read: %w", g, err))
						return
					}
					if len(ms) == 0 {
						select {
						case <-consCtx.Done():
						case <-time.After(5 * time.Millisecond):
						}
						continue
					}
					page := ids(ms)
					if rnd.Intn(8) == 0 {
						// Nack a part of the page: retried at once.
						var n int
						if err := b.Pool.QueryRow(consCtx, "SELECT fanout.nack($1, $2, '0 seconds'::interval, 'chaos')",
							ms[0].LeaseID, page[:1]).Scan(&n); err != nil {
							report(fmt.Errorf("%s nack: %w", g, err))
							return
						}
						gl.mu.Lock()
						gl.nacked += n
						gl.mu.Unlock()
						page = page[1:]
						if len(page) == 0 {
							continue
						}
					}
					var n int
					if err := b.Pool.QueryRow(consCtx, "SELECT fanout.ack($1, $2)", ms[0].LeaseID, page).Scan(&n); err != nil {
						report(fmt.Errorf("%s ack: %w", g, err))
						return
					}
					if n != len(page) {
						report(fmt.Errorf("%s ack settled %d of %d", g, n, len(page)))
						return
					}
					gl.mu.Lock()
					for _, id := range page {
						gl.acked[id]++
					}
					gl.mu.Unlock()
				}
			}(g, m)
		}
	}

	// Maintenance: rotation on a clock two hours ahead (a new partition
	// every round), cleanup, bitmap jobs, as the sidecar runs them.
	consWG.Add(1)
	var cleanups atomic.Int64
	go func() {
		defer consWG.Done()
		for consCtx.Err() == nil {
			for _, q := range []string{
				"SELECT fanout._manage_partitions(p_now => now() + interval '2 hours')",
				"SELECT fanout._cleanup_partitions(p_now => now() + interval '2 hours')",
				"SELECT fanout._bitmap_step()",
			} {
				_, err := b.Pool.Exec(consCtx, q)
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") {
					err = nil // a busy round; the next one tries again
				}
				if err != nil {
					report(fmt.Errorf("maintenance: %w", err))
					return
				}
			}
			cleanups.Add(1)
			select {
			case <-consCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatalf("%s: timed out", what)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	wait("traffic before the switch", func() bool { return published.Load() >= 600 })
	var switchID int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT fanout.alter_topic($1, completion => $2)", topic, to).Scan(new(int64)))
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT completion_switch_id FROM fanout.topic WHERE topic = $1", topic).Scan(&switchID))
	atSwitch := published.Load()
	pubMu.Lock()
	sofar := append([]int64{}, committed...)
	pubMu.Unlock()
	for _, g := range groups {
		gl := logs[g]
		gl.mu.Lock()
		open := 0
		for _, id := range sofar {
			if gl.acked[id] == 0 {
				open++
			}
		}
		gl.mu.Unlock()
		t.Logf("%s at the switch: %d of %d committed messages not acked yet", g, open, len(sofar))
	}
	wait("the switch finishing under traffic", func() bool {
		_, done, _ := b.switchState(t, topic)
		return done
	})
	wait("traffic after the switch", func() bool { return published.Load() >= atSwitch+600 })
	close(stopPub)
	pubWG.Wait()

	pubMu.Lock()
	want := append([]int64{}, committed...)
	pubMu.Unlock()
	wait("every group acking every committed message", func() bool {
		for _, g := range groups {
			gl := logs[g]
			gl.mu.Lock()
			n := 0
			for _, id := range want {
				if gl.acked[id] > 0 {
					n++
				}
			}
			gl.mu.Unlock()
			if n < len(want) {
				return false
			}
		}
		return true
	})
	// Storage of the region before the switch goes once everyone is done with it.
	wait("cleanup of the partitions below the switch", func() bool {
		los := b.partitionLos(t, topic)
		return len(los) > 0 && los[0] >= switchID&^((1<<32)-1)
	})
	if to == "reference" {
		// The region from the switch on goes by the reference rule: every
		// closed partition, once all of it is COMPLETED.
		wait("cleanup of the closed partitions after the switch", func() bool {
			var n int
			require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
				WHERE t.topic = $1 AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL`, topic).Scan(&n))
			return n == 0
		})
		c, done, bits := b.switchState(t, topic)
		require.Equal(t, "reference", c)
		require.True(t, done)
		require.Equal(t, len(groups), bits)
	}
	stopCons()
	consWG.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	wantSet := map[int64]bool{}
	for _, id := range want {
		wantSet[id] = true
	}
	var before, after int
	for _, id := range want {
		if id < switchID {
			before++
		} else {
			after++
		}
	}
	for _, g := range groups {
		gl := logs[g]
		lost, dups, extra := 0, 0, 0
		for _, id := range want {
			if gl.acked[id] == 0 {
				lost++
			}
		}
		for id, n := range gl.acked {
			if !wantSet[id] {
				extra++
			}
			if n > 1 {
				dups += n - 1
			}
		}
		t.Logf("%s: %d committed (%d before the switch, %d after), %d nacked, lost %d, duplicate acks %d, unexpected %d",
			g, len(want), before, after, gl.nacked, lost, dups, extra)
		require.Zero(t, lost, "%s lost messages", g)
		require.Zero(t, dups, "%s acked a message twice", g)
		require.Zero(t, extra, "%s received a message no transaction committed", g)
	}
	require.Positive(t, before)
	require.Positive(t, after)
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = $1", topic).Scan(&table))
	require.Empty(t, queryStrings(t, b.ctx, b.URL, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
	var lost int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT coalesce(sum(lost_messages), 0) FROM fanout.groups WHERE topic = $1", topic).Scan(&lost))
	require.Zero(t, lost, "cleanup counted no group's message as lost")
}
