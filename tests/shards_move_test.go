package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/shards"
)

// TestShardsMoveUnderTraffic: a pubsub topic with two groups moves from
// shard sa to sb (drain-and-switch) while two producers publish (single
// messages and batches) and two consumers per group read and ack, all
// through client.Sharded on their own connections. Every message a
// producer was told was published reaches every group (lost 0), each is
// stored once (old shard + new shard = published), publishes after the
// seal land on the new shard, and the move finishes once the old shard is
// drained.
func TestShardsMoveUnderTraffic(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	const topic = "a.live"
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

	var mu sync.Mutex
	published := map[string]bool{}
	seen := map[string]map[string]int{}
	for _, g := range groups {
		seen[g] = map[string]int{}
	}
	var count atomic.Int64
	// Producers stop between calls (a flag, not a cancelled context): a
	// publish cut short could commit without the producer knowing.
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
				if k%2 == 0 {
					keys = []string{fmt.Sprintf("p%d-%d", p, k)}
					if _, err := sc.Publish(ctx, topic, client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[0]))}); err != nil {
						t.Errorf("publish: %v", err)
						return
					}
				} else {
					msgs := make([]client.Message, 10)
					for i := range msgs {
						keys = append(keys, fmt.Sprintf("p%d-%d-%d", p, k, i))
						msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[i]))}
					}
					if _, err := sc.PublishBatch(ctx, topic, msgs); err != nil {
						t.Errorf("publish_batch: %v", err)
						return
					}
				}
				mu.Lock()
				for _, k := range keys {
					published[k] = true
				}
				mu.Unlock()
				count.Add(int64(len(keys)))
			}
		}(p, sc)
	}
	conCtx, stopCon := context.WithCancel(ctx)
	defer stopCon()
	var cw sync.WaitGroup
	for _, g := range groups {
		for c := 0; c < 2; c++ {
			sc, err := client.NewSharded(ctx, e.dirURL, client.WithDirectoryRefresh(20*time.Millisecond))
			require.NoError(t, err)
			defer sc.Close()
			cw.Add(1)
			go func(g string, c int, sc *client.Sharded) {
				defer cw.Done()
				for conCtx.Err() == nil {
					page, err := sc.Read(conCtx, topic, client.ReadOptions{Group: g, Consumer: fmt.Sprintf("c%d", c), MaxMessages: 20})
					if err != nil {
						if conCtx.Err() == nil {
							t.Errorf("read: %v", err)
						}
						return
					}
					if len(page.Messages) == 0 {
						select {
						case <-conCtx.Done():
						case <-time.After(5 * time.Millisecond):
						}
						continue
					}
					if _, err := sc.Ack(conCtx, page.Lease); err != nil {
						if conCtx.Err() == nil {
							t.Errorf("ack: %v", err)
						}
						return
					}
					mu.Lock()
					for _, m := range page.Messages {
						var v struct{ K string }
						if err := json.Unmarshal(m.Payload, &v); err == nil {
							seen[g][v.K]++
						}
					}
					mu.Unlock()
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
	dir, err := pgx.Connect(ctx, e.dirURL)
	require.NoError(t, err)
	defer dir.Close(ctx)
	require.NoError(t, shards.Move(ctx, dir, topic, "sb"))
	require.False(t, t.Failed(), "a producer or consumer failed during the move")
	atMove := count.Load()
	waitFor("300 messages after the move", func() bool { return count.Load() >= atMove+300 })
	stop.Store(true)
	pw.Wait()
	waitFor("the move to finish", func() bool {
		done, err := shards.FinishMove(ctx, dir, topic)
		require.NoError(t, err)
		return done
	})
	waitFor("every group to get every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range groups {
			for k := range published {
				if seen[g][k] == 0 {
					return false
				}
			}
		}
		return true
	})
	stopCon()
	cw.Wait()

	mu.Lock()
	defer mu.Unlock()
	oldCount, newCount := countOn(t, ctx, e.a.URL, topic), countOn(t, ctx, e.b.URL, topic)
	t.Logf("published %d: %d on the old shard, %d on the new one", len(published), oldCount, newCount)
	require.Positive(t, oldCount)
	require.Positive(t, newCount)
	require.EqualValues(t, len(published), oldCount+newCount, "each published message stored once")
	// The old shard refuses a publish now (PGQ26), whoever asks.
	connA, err := pgx.Connect(ctx, e.a.URL)
	require.NoError(t, err)
	defer connA.Close(ctx)
	var id int64
	requireSQLState(t, connA.QueryRow(ctx, `SELECT fanout.publish($1, '{}')`, topic).Scan(&id), client.CodeNotOnShard)
}
