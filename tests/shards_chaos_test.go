package tests

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/shards"
	"github.com/pgfanout/pgq/shards/movechaos"
)

func devdb(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "devdb.sh"), args...).CombinedOutput()
	require.NoError(t, err, "devdb.sh %v: %s", args, out)
}

// TestShardsMoveChaos: a pubsub topic moves from shard sb to sa under
// traffic with crashes (shards/movechaos, also a scenario of make chaos):
// the mover's connection to the old shard is terminated while it seals,
// the old shard is stopped at once (pg_ctl -m immediate) while groups
// drain it and started again, the move run again completes it and
// finish-move ends it. The verifier: every message a producer was told
// was published reaches every group (lost 0), and no message is delivered
// again after its ack succeeded (duplicates only of unacked messages).
func TestShardsMoveChaos(t *testing.T) {
	e := newShardEnv(t)
	res, err := movechaos.Run(e.ctx, movechaos.Config{
		DirectoryURL: e.dirURL, OldShardURL: e.b.URL, Topic: "b.chaos", To: "sa",
		Crash: func(context.Context) error { devdb(t, "crash", "shards-b"); return nil },
		Restart: func(context.Context) error {
			devdb(t, "start", "shards-b", strconv.Itoa(shardsPort(t)+1))
			return nil
		},
	})
	for _, g := range res.Groups {
		t.Logf("group %s: published %d, lost %d, duplicates %d (unacked pages: %d dropped, %d acks failed; %d publishes failed)",
			g.Group, res.Published, g.Lost, g.Duplicates, res.Dropped, res.AckErrors, res.PubErrors)
	}
	require.NoError(t, err)
	require.Len(t, res.Groups, len(movechaos.Groups))
	require.Zero(t, res.Lost(), "lost messages")
	require.Zero(t, res.AfterAck, "messages delivered again after their ack: %v", res.Violations)
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
