package tests

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/shards"
)

// TestShardsMirrorKillAndRestart: `pgq-shards mirror` copies a
// key-partitioned pubsub topic from one cluster to a topic of another
// while producers publish, and is killed (SIGKILL) three times while pages
// are in flight and started again; before it first runs, a mirror that died
// between its target commit and its source ack left a page copied and
// unacked. The target topic ends with every source message exactly once
// (dedupe_key = source id) and, per message_group, in the order published.
func TestShardsMirrorKillAndRestart(t *testing.T) {
	e := newShardEnv(t)
	ctx := e.ctx
	const topic = "m.orders"
	src, err := pgxpool.New(ctx, e.a.URL)
	require.NoError(t, err)
	defer src.Close()
	dst, err := pgxpool.New(ctx, e.b.URL)
	require.NoError(t, err)
	defer dst.Close()
	for _, db := range []*pgxpool.Pool{src, dst} {
		_, err := db.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub', partitions => 4)`, topic)
		require.NoError(t, err)
	}
	_, err = src.Exec(ctx, `SELECT fanout.subscribe($1, 'mirror')`, topic)
	require.NoError(t, err)
	_, err = dst.Exec(ctx, `SELECT fanout.subscribe($1, 'check')`, topic)
	require.NoError(t, err)

	// Producers: each owns 5 keys and publishes one message per key per
	// batch, numbered 1, 2, ... per key.
	var published atomic.Int64
	var stop atomic.Bool
	defer stop.Store(true)
	lastN := make([]atomic.Int64, 2)
	var pw sync.WaitGroup
	for p := 0; p < 2; p++ {
		pw.Add(1)
		go func(p int) {
			defer pw.Done()
			pub := client.NewPublisher(src)
			for n := int64(1); !stop.Load(); n++ {
				msgs := make([]client.Message, 5)
				for k := range msgs {
					g := fmt.Sprintf("k%d-%d", p, k)
					msgs[k] = client.Message{MessageGroup: g, Payload: json.RawMessage(fmt.Sprintf(`{"g":%q,"n":%d}`, g, n))}
				}
				if _, err := pub.PublishBatch(ctx, topic, msgs); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				lastN[p].Store(n)
				published.Add(5)
				time.Sleep(2 * time.Millisecond)
			}
		}(p)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			require.False(t, t.Failed(), "a producer failed while waiting for %s", what)
			require.False(t, time.Now().After(deadline), "waited 2 minutes for %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("100 messages", func() bool { return published.Load() >= 100 })

	// A mirror that died after its copy committed and before its ack.
	const consumer = "mirror-1"
	ds, err := client.Read(ctx, src, topic, client.ReadOptions{Group: "mirror", Consumer: consumer, MaxMessages: 20, Lease: time.Second})
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	half := make([]client.Message, len(ds))
	for i, d := range ds {
		half[i] = client.Message{Payload: d.Payload, MessageGroup: d.MessageGroup, DedupeKey: shards.MirrorKey(topic, d.ID, d.PublishedAt)}
	}
	_, err = client.NewPublisher(dst).PublishBatch(ctx, topic, half)
	require.NoError(t, err)

	bin := buildBinary(t, "../cmd/pgq-shards")
	args := []string{"mirror", "--from", e.a.URL, "--to", e.b.URL, "--topic", topic, "--group", "mirror",
		"--consumer", consumer, "--lease", "2s", "--max-messages", "20"}
	mirrored := func() int64 { return countOn(t, ctx, e.b.URL, topic) }
	for round := 0; round < 3; round++ {
		var m process
		m.start(t, bin, nil, args...)
		at := mirrored()
		waitFor(fmt.Sprintf("round %d to copy 100 messages", round), func() bool { return mirrored() >= at+100 })
		m.kill()
	}
	var m process
	m.start(t, bin, nil, args...)
	atLast := published.Load()
	waitFor("200 more messages", func() bool { return published.Load() >= atLast+200 })
	stop.Store(true)
	pw.Wait()
	total := published.Load()
	waitFor("the mirror to catch up", func() bool { return mirrored() >= total })
	m.stop(t)
	require.EqualValues(t, total, mirrored(), "every source message copied once: %s", m.Output())

	// Read the whole target topic; per key, by target id, 1, 2, ... n.
	type row struct {
		id int64
		n  int64
	}
	byKey := map[string][]row{}
	for got := 0; int64(got) < total; {
		rows, err := dst.Query(ctx, `SELECT lease_id, message_id, payload FROM fanout.read($1, 'check', 'c', max_messages => 1000)`, topic)
		require.NoError(t, err)
		var lease int64
		n := 0
		for rows.Next() {
			var id int64
			var payload []byte
			require.NoError(t, rows.Scan(&lease, &id, &payload))
			var v struct {
				G string
				N int64
			}
			require.NoError(t, json.Unmarshal(payload, &v))
			byKey[v.G] = append(byKey[v.G], row{id, v.N})
			n++
		}
		require.NoError(t, rows.Err())
		require.Positive(t, n, "the check group read nothing with %d of %d read", got, total)
		_, err = dst.Exec(ctx, `SELECT fanout.ack($1)`, lease)
		require.NoError(t, err)
		got += n
	}
	require.Len(t, byKey, 10)
	for g, rs := range byKey {
		sort.Slice(rs, func(i, j int) bool { return rs[i].id < rs[j].id })
		for i, r := range rs {
			require.EqualValues(t, i+1, r.n, "key %s: message %d in target order", g, i)
		}
		p := 0
		fmt.Sscanf(g, "k%d-", &p)
		require.EqualValues(t, lastN[p].Load(), len(rs), "key %s: every message", g)
	}
	var left int64
	require.NoError(t, src.QueryRow(ctx, `SELECT lag_messages + in_flight + expired FROM fanout.groups WHERE topic = $1 AND group_name = 'mirror'`, topic).Scan(&left))
	require.Zero(t, left, "the source group is drained")
}
