package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/internal/testdb"
	"github.com/pgfanout/pgq/orchestrator"
)

// TestClientAcrossFailover: the client package across the faults of a
// failover, on a real primary and a real standby (FAILOVER_PORT and the
// next one; not parallel, so it is done before TestStaleAckAfterAsyncFailover
// takes those ports).
//
//  1. A COMMIT waiting for a synchronous standby is not cancelled when the
//     caller's context ends (a cancelled wait returns OK without a standby
//     having the message); the connection terminated during it
//     (pg_terminate_backend) is reported as ErrCommitUnknown, and the retry
//     with the same dedupe key returns the first message.
//  2. A read-only node first in the multi-host URL
//     (target_session_attrs=read-write): publisher and consumer work on the
//     primary behind it.
//  3. The primary made read-only without a restart (default_transaction_read_only,
//     as a demoted node keeps its connections) and the standby promoted: the
//     consumer's pooled connections and its LISTEN connection sit on the old
//     node and meet 25006; the consumer discards them, connects to the new
//     primary, LISTENs there and polls once, and gets what was published
//     there (its poll interval is an hour: only the reconnect's poll and
//     notifications on the new primary can deliver it). A sidecar on the
//     same URL leaves the read-only node too and renews its leader lease on
//     the new primary.
func TestClientAcrossFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port := failoverPort(t)
	primary, adminP := freshCluster(ctx, t, "ha-p", port)
	standby := &cluster{root: primary.root, name: "ha-s", port: port + 1}
	require.NoError(t, standby.destroy(ctx))
	t.Cleanup(func() { _ = standby.destroy(context.Background()) })
	u, err := freshDatabase(ctx, adminP, "hacl")
	require.NoError(t, err)
	admin := connect(ctx, t, adminP)
	exec := mustExec(ctx, t)
	db := connect(ctx, t, u)
	exec(db, `SELECT fanout.create_topic('q', max_attempts => 10)`)

	// 1. COMMIT waiting for a synchronous standby that never comes.
	exec(admin, `ALTER SYSTEM SET synchronous_standby_names = 'nobody'`)
	exec(admin, `SELECT pg_reload_conf()`)
	pool := newPool(ctx, t, u, "ha-commit")
	pub := client.NewPublisher(pool)
	msg := client.Message{Payload: json.RawMessage(`{"k":"once"}`), DedupeKey: "once"}
	pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer pcancel()
	res := make(chan error, 1)
	go func() {
		_, err := pub.Publish(pctx, "q", msg)
		res <- err
	}()
	var pid int
	require.Eventually(t, func() bool {
		err := db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'ha-commit' AND wait_event = 'SyncRep'`).Scan(&pid)
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the publisher's COMMIT waits for the synchronous standby")
	<-pctx.Done()
	// The caller's deadline passed; the COMMIT still waits (a cancel would
	// have ended the wait and returned OK).
	var waiting bool
	require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`, pid).Scan(&waiting))
	require.True(t, waiting, "the COMMIT was cancelled with its context")
	select {
	case err := <-res:
		t.Fatalf("Publish returned while its COMMIT waits for the standby: %v", err)
	default:
	}
	exec(admin, `SELECT pg_terminate_backend($1)`, pid)
	err = <-res
	require.Error(t, err)
	require.True(t, errors.Is(err, client.ErrCommitUnknown), "want ErrCommitUnknown, got %v", err)
	exec(admin, `ALTER SYSTEM RESET synchronous_standby_names`)
	exec(admin, `SELECT pg_reload_conf()`)
	// It did commit (locally): the retry with the same dedupe key returns it.
	var firstID, peek int64
	require.NoError(t, db.QueryRow(ctx, `SELECT lease_id, message_id FROM fanout.read('q', consumer => 'peek')`).Scan(&peek, &firstID))
	exec(db, `SELECT fanout.nack($1)`, peek)
	id, err := pub.Publish(ctx, "q", msg)
	require.NoError(t, err)
	require.Equal(t, firstID, id, "the retry with the same dedupe key returns the first message")

	// 2. The standby first in the URL.
	adminS, err := standby.standbyOf(ctx, primary)
	require.NoError(t, err)
	su := testdb.WithDatabase(adminS, "hacl")
	waitReplayed(ctx, t, db, su)
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/hacl?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		standby.port, primary.port)
	cpool := newPool(ctx, t, multi, "ha-consumer")
	var mu sync.Mutex
	got := map[string]bool{}
	cons, err := client.NewConsumer(cpool, client.Config{Topic: "q", Consumer: "c1", Lease: 5 * time.Second,
		PollInterval: time.Hour, HeartbeatInterval: 300 * time.Millisecond, ErrorBackoff: 50 * time.Millisecond,
		MaxErrorBackoff: 200 * time.Millisecond},
		func(_ context.Context, d *client.Delivery) error {
			var p struct{ K string }
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				return err
			}
			mu.Lock()
			got[p.K] = true
			mu.Unlock()
			return nil
		})
	require.NoError(t, err)
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx) }()
	defer func() { rcancel(); <-done }()
	mpub := client.NewPublisher(newPool(ctx, t, multi, "ha-pub"))
	for i := range 3 {
		_, err := mpub.Publish(ctx, "q", client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":"before-%d"}`, i))})
		require.NoError(t, err)
	}
	have := func(keys ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if !got[k] {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, have("once", "before-0", "before-1", "before-2"), time.Minute, 50*time.Millisecond)
	// A sidecar on the same URL leads (its election has a connection of
	// its own; its jobs run on the pool).
	spool := newPool(ctx, t, multi, "ha-sidecar")
	sched, err := orchestrator.NewScheduler(spool, orchestrator.SchedulerConfig{LeaderID: "ha-sidecar",
		LeaderTTL: 2 * time.Second, Jitter: -1, DiscoverSchedule: "@every 1s", ShutdownTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- sched.Run(sctx) }()
	defer func() { scancel(); <-sdone }()
	require.Eventually(t, sched.IsLeader, time.Minute, 50*time.Millisecond)
	var onPrimary int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ha-consumer'`).Scan(&onPrimary))
	require.Positive(t, onPrimary, "the consumer's connections are on the primary")

	// 3. The old primary turns read-only without dropping connections; the
	// standby is promoted and gets new messages.
	exec(admin, `ALTER SYSTEM SET default_transaction_read_only = on`)
	exec(admin, `SELECT pg_reload_conf()`)
	require.NoError(t, standby.promote(ctx))
	require.NoError(t, waitReady(ctx, su, time.Minute))
	sdb := connect(ctx, t, su)
	var promotedAt time.Time
	require.NoError(t, sdb.QueryRow(ctx, `SELECT now()`).Scan(&promotedAt))
	for i := range 3 {
		exec(sdb, `SELECT fanout.publish('q', jsonb_build_object('k', $1::text))`, fmt.Sprintf("after-%d", i))
	}
	require.Eventually(t, have("after-0", "after-1", "after-2"), time.Minute, 50*time.Millisecond,
		"the consumer reconnected to the new primary and polled")
	var onNew int
	require.NoError(t, sdb.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ha-consumer' AND query ILIKE 'LISTEN%'`).Scan(&onNew))
	require.Positive(t, onNew, "the consumer LISTENs on the new primary")
	// A notification on the new primary now wakes it (poll interval: 1 h).
	exec(sdb, `SELECT fanout.publish('q', '{"k":"notified"}')`)
	require.Eventually(t, have("notified"), time.Minute, 50*time.Millisecond)
	// And the publisher's pool follows too (its connection met 25006 first).
	_, err = mpub.Publish(ctx, "q", client.Message{Payload: json.RawMessage(`{"k":"pub-after"}`)})
	if err != nil {
		require.Equal(t, client.CodeReadOnlyTransaction, client.SQLState(err), "the first publish may meet the read-only node")
		_, err = mpub.Publish(ctx, "q", client.Message{Payload: json.RawMessage(`{"k":"pub-after"}`)})
	}
	require.NoError(t, err)
	require.Eventually(t, have("pub-after"), time.Minute, 50*time.Millisecond)
	// The sidecar's election left the read-only node: it renews its lease
	// on the new primary.
	require.Eventually(t, func() bool {
		var renewed bool
		err := sdb.QueryRow(ctx, `SELECT expires_at - interval '2 seconds' > $1 FROM fanout.leader
			WHERE name = 'pgq-scheduler' AND leader_id = 'ha-sidecar'`, promotedAt).Scan(&renewed)
		return err == nil && renewed
	}, time.Minute, 50*time.Millisecond, "the sidecar renews its leader lease on the new primary")
	require.True(t, sched.IsLeader())
}

func newPool(ctx context.Context, t *testing.T, u, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
