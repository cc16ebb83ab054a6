package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/shards"
)

// oneShardEnv: a directory database and one shard ("s1", topics 'r14.%'),
// both on the suite's server: enough for the sharded client's routing and
// error classification (no PL/Proxy, no second cluster).
func oneShardEnv(t *testing.T) (b *bundle, dirURL string) {
	t.Helper()
	b = setup(t)
	admin := testdb.ServerURL(t)
	dirDB := fmt.Sprintf("r14_dir_%d", time.Now().UnixNano())
	c, err := pgx.Connect(b.ctx, admin)
	require.NoError(t, err)
	_, err = c.Exec(b.ctx, "CREATE DATABASE "+dirDB)
	require.NoError(t, err)
	require.NoError(t, c.Close(b.ctx))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dirDB+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	dirURL = testdb.WithDatabase(admin, dirDB)
	dc, err := pgx.Connect(b.ctx, dirURL)
	require.NoError(t, err)
	defer dc.Close(b.ctx)
	_, err = shards.MigrateDirectory(b.ctx, dc)
	require.NoError(t, err)
	_, err = shards.AddShard(b.ctx, dc, "s1", kv(t, b.URL))
	require.NoError(t, err)
	_, err = shards.Place(b.ctx, dc, "r14.%", "s1")
	require.NoError(t, err)
	return b, dirURL
}

// A call the caller itself gives up (its context cancelled while the shard
// is up, answering, and the call waits for a lock there) is not
// ErrShardUnreachable: that error says the shard is down, and a caller
// that fails over or alerts on it must not do so for its own deadline.
func TestReview14ShardedCallerCancelIsNotUnreachable(t *testing.T) {
	t.Parallel()
	b, dirURL := oneShardEnv(t)
	sc, err := client.NewSharded(b.ctx, dirURL)
	require.NoError(t, err)
	defer sc.Close()
	_, err = sc.CreateTopic(b.ctx, "r14.t", "queue")
	require.NoError(t, err)
	_, err = sc.Publish(b.ctx, "r14.t", client.Message{Payload: json.RawMessage(`{}`)})
	require.NoError(t, err, "the pool is open and the shard answers")

	// Cancelled before the call.
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err = sc.Publish(ctx, "r14.t", client.Message{Payload: json.RawMessage(`{}`)})
	require.Error(t, err)
	require.NotErrorIs(t, err, client.ErrShardUnreachable, "cancelled before the call: %v", err)

	// Cancelled while the call waits on the shard (a drop of the topic
	// holds its table in another session).
	holder := b.Conn(t)
	tx, err := holder.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT fanout.drop_topic('r14.t', force => true)`)
	require.NoError(t, err)
	ctx, cancel = context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := sc.Publish(ctx, "r14.t", client.Message{Payload: json.RawMessage(`{}`)})
		done <- err
	}()
	b.waitLockWaiters(t, 1)
	cancel()
	err = <-done
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled) || client.SQLState(err) == "57014", "the caller's cancel: %v", err)
	require.NotErrorIs(t, err, client.ErrShardUnreachable, "cancelled while waiting on a live shard: %v", err)
}

// waitLockWaiters waits until n backends of this test's database wait for a
// lock.
func (b *bundle) waitLockWaiters(t *testing.T, n int) {
	t.Helper()
	for {
		var waiting int
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(DISTINCT l.pid) FROM pg_locks l
			JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()`).Scan(&waiting))
		if waiting >= n {
			return
		}
		select {
		case <-b.ctx.Done():
			t.Fatal("no call waited for a lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A page whose lease expires on the last attempt dead-letters its messages
// with a reason that names the lease: the id read returned, never the
// internal one (slot * 2^32 + epoch * 2^16 + page), which a tenant reads in
// fanout.dead_letters and which counts the slots other tenants opened (the
// leak the opaque lease ids close).
func TestReview14DeadLetterReasonNamesThePublicLease(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	b.createTopic(t, b.Pool, "a.dl", "max_attempts => 1")
	b.publish(t, b.Pool, "a.dl", `{}`)
	page := b.read(t, f.a, "a.dl", nil, "wa", 1, "1 hour")
	require.Len(t, page, 1)
	raw := rawLease(t, b, page[0].LeaseID)
	require.NotEqual(t, raw, page[0].LeaseID, "fixture: the ids differ")
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.lease SET expires_at = clock_timestamp() - interval '1 second' WHERE lease_id = $1`, raw)
	require.NoError(t, err)
	require.Empty(t, b.read(t, f.a, "a.dl", nil, "wb", 1, "1 hour"), "the last attempt: dead-lettered, not handed out")
	var reason string
	require.NoError(t, f.a.QueryRow(b.ctx, `SELECT last_error FROM fanout.dead_letters WHERE topic = 'a.dl'`).Scan(&reason))
	require.NotContains(t, reason, fmt.Sprint(raw), "the internal lease id in a tenant's view")
	require.Contains(t, reason, fmt.Sprintf("lease %d ", page[0].LeaseID), "the id the consumer was given")
}

// A mirror's dedupe key must name the source message, not only its id: a
// source topic dropped and created again (or moved to another shard)
// numbers its messages from 1 again, and with keys of topic and id only the
// new messages 1..n were taken in the target for copies of the old ones
// (dedupe_window: 24 hours by default) and acked on the source: lost.
func TestReview14MirrorKeysSurviveASourceIncarnation(t *testing.T) {
	t.Parallel()
	srcB, dstB := setup(t), setup(t)
	ctx := srcB.ctx
	src, err := pgxpool.New(ctx, srcB.URL)
	require.NoError(t, err)
	defer src.Close()
	dst, err := pgxpool.New(ctx, dstB.URL)
	require.NoError(t, err)
	defer dst.Close()
	const topic = "r14.m"
	_, err = dst.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, topic)
	require.NoError(t, err)
	_, err = dst.Exec(ctx, `SELECT fanout.subscribe($1, 'check')`, topic)
	require.NoError(t, err)
	incarnation := func(tag string) {
		_, err := src.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub')`, topic)
		require.NoError(t, err)
		_, err = src.Exec(ctx, `SELECT fanout.subscribe($1, 'mirror')`, topic)
		require.NoError(t, err)
		for i := 1; i <= 3; i++ {
			_, err = src.Exec(ctx, `SELECT fanout.publish($1, $2)`, topic, fmt.Sprintf(`{"%s":%d}`, tag, i))
			require.NoError(t, err)
		}
		m, err := shards.NewMirror(ctx, src, dst, shards.MirrorConfig{Topic: topic, Group: "mirror", Consumer: "m1"})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(rctx) }()
		for m.Stats().Messages < 3 {
			select {
			case <-ctx.Done():
				t.Fatal("the mirror never copied the page")
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		require.NoError(t, <-done)
	}
	incarnation("old")
	require.EqualValues(t, 3, countOn(t, ctx, dstB.URL, topic))
	_, err = src.Exec(ctx, `SELECT fanout.drop_topic($1, force => true)`, topic)
	require.NoError(t, err)
	incarnation("new")
	require.EqualValues(t, 6, countOn(t, ctx, dstB.URL, topic), "the new topic's messages 1..3 are new messages")
}
