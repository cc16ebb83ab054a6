package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/shards"
)

// deliveryLog is the chaos verifier of a sharded topic: per group, which
// message keys producers were told were published, every delivery, and
// when each key's ack succeeded. A delivery is a duplicate the leases
// allow when the message had not been acked when its read began (an ack
// that failed, a page a consumer dropped, a lease the shard lost in a
// crash); a delivery whose read began after its ack succeeded is a
// violation.
type deliveryLog struct {
	mu         sync.Mutex
	clock      int64 // orders read starts and ack successes
	published  map[string]bool
	delivered  map[string]map[string]int   // group -> key -> deliveries
	ackedAt    map[string]map[string]int64 // group -> key -> clock of its first successful ack
	violations []string
}

func newDeliveryLog(groups []string) *deliveryLog {
	l := &deliveryLog{published: map[string]bool{}, delivered: map[string]map[string]int{}, ackedAt: map[string]map[string]int64{}}
	for _, g := range groups {
		l.delivered[g] = map[string]int{}
		l.ackedAt[g] = map[string]int64{}
	}
	return l
}

func (l *deliveryLog) tick() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	return l.clock
}

func (l *deliveryLog) publishedKeys(keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.published[k] = true
	}
}

// read records the deliveries of a read that began at clock start.
func (l *deliveryLog) read(g string, start int64, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.delivered[g][k]++
		if at, ok := l.ackedAt[g][k]; ok && at < start {
			l.violations = append(l.violations, fmt.Sprintf("group %s: %s delivered again after its ack", g, k))
		}
	}
}

func (l *deliveryLog) acked(g string, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	for _, k := range keys {
		if _, ok := l.ackedAt[g][k]; !ok {
			l.ackedAt[g][k] = l.clock
		}
	}
}

// missing counts published keys group g never got.
func (l *deliveryLog) missing(g string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k := range l.published {
		if l.delivered[g][k] == 0 {
			n++
		}
	}
	return n
}

// counts returns, for group g, the deliveries beyond the first of each key.
func (l *deliveryLog) duplicates(g string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.delivered[g] {
		if c > 1 {
			n += c - 1
		}
	}
	return n
}

func devdb(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "devdb.sh"), args...).CombinedOutput()
	require.NoError(t, err, "devdb.sh %v: %s", args, out)
}

// TestShardsMoveChaos: a pubsub topic moves from shard sb to sa under
// traffic (two producers, two groups of two consumers, a 2 s lease, some
// pages dropped unacked as a crashing consumer would) with crashes: the
// mover's connection to the old shard is terminated while it seals
// (pg_terminate_backend), then the old shard is stopped at once (pg_ctl -m
// immediate) while groups drain it, and started again. Running the move
// again completes it (the old shard refuses publishes, PGQ26), finish-move
// ends it once drained. The verifier: every message a producer was told
// was published reaches every group (lost 0), and no message is delivered
// again after its ack succeeded (duplicates only of unacked messages).
func TestShardsMoveChaos(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	const topic = "b.chaos"
	groups := []string{"g1", "g2"}
	admin, err := client.NewSharded(ctx, e.dirURL)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.CreateTopic(ctx, topic, "pubsub")
	require.NoError(t, err)
	for _, g := range groups {
		_, err := admin.Subscribe(ctx, topic, g)
		require.NoError(t, err)
	}
	vl := newDeliveryLog(groups)
	var count, pubErrors atomic.Int64
	var stop atomic.Bool
	defer stop.Store(true)
	var pw sync.WaitGroup
	for p := 0; p < 2; p++ {
		sc, err := client.NewSharded(ctx, e.dirURL, client.WithDirectoryRefresh(20*time.Millisecond))
		require.NoError(t, err)
		defer sc.Close()
		pw.Add(1)
		go func(p int, sc *client.Sharded) {
			defer pw.Done()
			for k := 0; !stop.Load(); k++ {
				var keys []string
				var err error
				if k%2 == 0 {
					keys = []string{fmt.Sprintf("p%d-%d", p, k)}
					_, err = sc.Publish(ctx, topic, client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[0]))})
				} else {
					msgs := make([]client.Message, 10)
					for i := range msgs {
						keys = append(keys, fmt.Sprintf("p%d-%d-%d", p, k, i))
						msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[i]))}
					}
					_, err = sc.PublishBatch(ctx, topic, msgs)
				}
				if err != nil {
					// The old shard crashed under a stale route: the
					// outcome is unknown, the keys are not counted (a copy
					// that committed is an extra, not a loss).
					pubErrors.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				vl.publishedKeys(keys)
				count.Add(int64(len(keys)))
			}
		}(p, sc)
	}
	conCtx, stopCon := context.WithCancel(ctx)
	defer stopCon()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cw sync.WaitGroup
	var dropped, ackErrors atomic.Int64
	for _, g := range groups {
		for c := 0; c < 2; c++ {
			sc, err := client.NewSharded(ctx, e.dirURL, client.WithDirectoryRefresh(20*time.Millisecond),
				client.WithShardedLogger(quiet)) // a read of the downed shard warns each time
			require.NoError(t, err)
			defer sc.Close()
			cw.Add(1)
			go func(g string, c int, sc *client.Sharded) {
				defer cw.Done()
				for n := 0; conCtx.Err() == nil; n++ {
					start := vl.tick()
					page, err := sc.Read(conCtx, topic, client.ReadOptions{Group: g, Consumer: fmt.Sprintf("c%d", c),
						MaxMessages: 20, Lease: 2 * time.Second})
					if err != nil {
						if conCtx.Err() == nil {
							time.Sleep(20 * time.Millisecond) // a shard is down: the read is retried
						}
						continue
					}
					if len(page.Messages) == 0 {
						select {
						case <-conCtx.Done():
						case <-time.After(5 * time.Millisecond):
						}
						continue
					}
					keys := make([]string, 0, len(page.Messages))
					for _, m := range page.Messages {
						var v struct{ K string }
						if err := json.Unmarshal(m.Payload, &v); err != nil {
							t.Errorf("payload %s: %v", m.Payload, err)
							return
						}
						keys = append(keys, v.K)
					}
					vl.read(g, start, keys)
					if n%7 == 3 {
						dropped.Add(1) // a consumer that died holding the page: its lease expires
						continue
					}
					if _, err := sc.Ack(conCtx, page.Lease); err != nil {
						ackErrors.Add(1) // the shard went down: the messages come back
						continue
					}
					vl.acked(g, keys)
				}
			}(g, c, sc)
		}
	}

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			require.False(t, t.Failed(), "a producer or consumer failed while waiting for %s", what)
			require.False(t, time.Now().After(deadline), "waited 2 minutes for %s", what)
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("300 messages before the move", func() bool { return count.Load() >= 300 })

	// 1. The mover dies while sealing the old shard: a transaction holds
	// the topic's message table (as a long publish would), the seal waits
	// for it, and the mover's connection is terminated there.
	oldConn, err := pgx.Connect(ctx, e.b.URL)
	require.NoError(t, err)
	defer oldConn.Close(ctx)
	var table string
	require.NoError(t, oldConn.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, topic).Scan(&table))
	holder, err := oldConn.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `LOCK TABLE fanout_data.`+pgx.Identifier{table}.Sanitize()+` IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	dir, err := pgx.Connect(ctx, e.dirURL)
	require.NoError(t, err)
	defer dir.Close(ctx)
	moveErr := make(chan error, 1)
	go func() { moveErr <- shards.Move(ctx, dir, topic, "sa") }()
	killer, err := pgx.Connect(ctx, e.b.URL)
	require.NoError(t, err)
	defer killer.Close(ctx)
	waitFor("the mover to wait in its seal", func() bool {
		var n int
		require.NoError(t, killer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE query LIKE '%fanout_shard.seal%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n))
		return n > 0
	})
	require.Error(t, <-moveErr, "the mover's connection was terminated")
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, oldConn.Close(ctx))
	var shard string
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT shard FROM fanout_directory.shard_for($1)`, topic).Scan(&shard))
	require.Equal(t, "sa", shard, "the directory switched before the mover died")

	// 2. The old shard stops at once while the groups drain it (right
	// after the mover died: pages of it are leased), and starts again: the
	// leases it held come back after they expire.
	devdb(t, "crash", "shards-b")
	atCrash := count.Load()
	waitFor("200 messages while the old shard is down", func() bool { return count.Load() >= atCrash+200 })
	devdb(t, "start", "shards-b", strconv.Itoa(shardsPort(t)+1))

	// 3. Running the move again completes it: the old shard is sealed.
	require.NoError(t, shards.Move(ctx, dir, topic, "sa"))
	connB, err := pgx.Connect(ctx, e.b.URL)
	require.NoError(t, err)
	defer connB.Close(ctx)
	var id int64
	requireSQLState(t, connB.QueryRow(ctx, `SELECT fanout.publish($1, '{}')`, topic).Scan(&id), client.CodeNotOnShard)
	atResume := count.Load()
	waitFor("200 messages after the move resumed", func() bool { return count.Load() >= atResume+200 })
	stop.Store(true)
	pw.Wait()
	waitFor("the move to finish", func() bool {
		done, err := shards.FinishMove(ctx, dir, topic)
		require.NoError(t, err)
		return done
	})
	waitFor("every group to get every message", func() bool {
		for _, g := range groups {
			if vl.missing(g) > 0 {
				return false
			}
		}
		return true
	})
	stopCon()
	cw.Wait()

	vl.mu.Lock()
	violations := append([]string(nil), vl.violations...)
	total := len(vl.published)
	vl.mu.Unlock()
	for _, g := range groups {
		t.Logf("group %s: published %d, lost %d, duplicates %d (unacked pages: %d dropped, %d acks failed; %d publishes failed)",
			g, total, vl.missing(g), vl.duplicates(g), dropped.Load(), ackErrors.Load(), pubErrors.Load())
		require.Zero(t, vl.missing(g), "group %s lost messages", g)
	}
	require.Empty(t, violations, "messages delivered again after their ack")
}

// TestShardsFinishMoveSeals: a mover that died right after switching the
// directory left the old shard unsealed (publishes there still succeed);
// finish-move seals it (PGQ26 from then on) instead of waiting forever for
// a seal, and ends the move on a later call once the groups drained.
func TestShardsFinishMoveSeals(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	const topic = "a.half"
	sc, err := client.NewSharded(ctx, e.dirURL)
	require.NoError(t, err)
	defer sc.Close()
	_, err = sc.CreateTopic(ctx, topic, "queue")
	require.NoError(t, err)
	// What Move does before its seal, and nothing after it.
	var from string
	require.NoError(t, e.dir.QueryRow(ctx, `SELECT fanout_directory.move($1, 'sb')`, topic).Scan(&from))
	require.Equal(t, "sa", from)
	connA, err := pgx.Connect(ctx, e.a.URL)
	require.NoError(t, err)
	defer connA.Close(ctx)
	var id int64
	require.NoError(t, connA.QueryRow(ctx, `SELECT fanout.publish($1, '{}')`, topic).Scan(&id), "not sealed yet")

	dir, err := pgx.Connect(ctx, e.dirURL)
	require.NoError(t, err)
	defer dir.Close(ctx)
	done, err := shards.FinishMove(ctx, dir, topic)
	require.NoError(t, err)
	require.False(t, done, "the round that seals does not end the move")
	requireSQLState(t, connA.QueryRow(ctx, `SELECT fanout.publish($1, '{}')`, topic).Scan(&id), client.CodeNotOnShard)
	done, err = shards.FinishMove(ctx, dir, topic)
	require.NoError(t, err)
	require.False(t, done, "the message published before the seal is still unread")
	var n int
	require.NoError(t, connA.QueryRow(ctx, `SELECT count(fanout.ack(lease_id)) FROM (SELECT DISTINCT lease_id FROM fanout.read($1, max_messages => 10)) r`, topic).Scan(&n))
	require.Equal(t, 1, n)
	done, err = shards.FinishMove(ctx, dir, topic)
	require.NoError(t, err)
	require.True(t, done)
}

// TestShardsOneShardDown: with shard sb stopped at once (pg_ctl -m
// immediate), the sharded client still publishes, reads and acks the
// topics of sa, while a call to a topic of sb fails with
// ErrShardUnreachable naming the shard (not a hang, not PGQ26); once sb is
// back, its topics work again through the same client.
func TestShardsOneShardDown(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	sc, err := client.NewSharded(ctx, e.dirURL)
	require.NoError(t, err)
	defer sc.Close()
	for _, topic := range []string{"a.up", "b.down"} {
		_, err := sc.CreateTopic(ctx, topic, "queue")
		require.NoError(t, err)
		_, err = sc.Publish(ctx, topic, client.Message{Payload: json.RawMessage(`{"n":0}`)})
		require.NoError(t, err)
	}
	page, err := sc.Read(ctx, "b.down", client.ReadOptions{MaxMessages: 10})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)

	devdb(t, "crash", "shards-b")
	for i := 1; i <= 3; i++ {
		_, err = sc.Publish(ctx, "b.down", client.Message{Payload: json.RawMessage(`{"n":1}`)})
		require.ErrorIs(t, err, client.ErrShardUnreachable, "publish %d to the downed shard", i)
		require.Contains(t, err.Error(), `shard "sb"`)
		_, err = sc.Read(ctx, "b.down", client.ReadOptions{MaxMessages: 10})
		require.ErrorIs(t, err, client.ErrShardUnreachable)
		_, err = sc.Ack(ctx, page.Lease)
		require.ErrorIs(t, err, client.ErrShardUnreachable)

		_, err = sc.PublishBatch(ctx, "a.up", []client.Message{{Payload: json.RawMessage(`{"n":1}`)}, {Payload: json.RawMessage(`{"n":2}`)}})
		require.NoError(t, err, "the other shard's topic, round %d", i)
	}
	up, err := sc.Read(ctx, "a.up", client.ReadOptions{MaxMessages: 100})
	require.NoError(t, err)
	require.Len(t, up.Messages, 7)
	n, err := sc.Ack(ctx, up.Lease)
	require.NoError(t, err)
	require.Equal(t, 7, n)

	devdb(t, "start", "shards-b", strconv.Itoa(shardsPort(t)+1))
	require.Eventually(t, func() bool {
		_, err := sc.Publish(ctx, "b.down", client.Message{Payload: json.RawMessage(`{"n":2}`)})
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the shard is back")
	require.EqualValues(t, 2, countOn(t, ctx, e.b.URL, "b.down"))
}
