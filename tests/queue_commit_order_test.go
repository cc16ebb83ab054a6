package tests

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Invariant 2 (docs/design.md §3.2): A publishes first (lower id, lower txid) and commits after B's
// message was read and acked; A's message is still delivered.
func TestQueueOutOfOrderCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "ooo"
	b.createTopic(t, b.Pool, topic)
	connA, connB := b.Conn(t), b.Conn(t)

	txA, err := connA.Begin(b.ctx)
	require.NoError(t, err)
	defer txA.Rollback(b.ctx) //nolint:errcheck
	idA := b.publish(t, txA, topic, `{"who":"A"}`)

	txB, err := connB.Begin(b.ctx)
	require.NoError(t, err)
	idB := b.publish(t, txB, topic, `{"who":"B"}`)
	require.NoError(t, txB.Commit(b.ctx))
	require.Less(t, idA, idB, "A took its id first")

	ms := b.read(t, b.Pool, topic, nil, "c1", 10, "1 minute")
	require.Equal(t, []int64{idB}, ids(ms), "only B is committed")
	require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
	require.Empty(t, b.read(t, b.Pool, topic, nil, "c1", 10, "1 minute"), "A is still uncommitted")

	require.NoError(t, txA.Commit(b.ctx))
	ms = b.read(t, b.Pool, topic, nil, "c2", 10, "1 minute")
	require.Equal(t, []int64{idA}, ids(ms), "A's message is delivered after its late commit")
	require.JSONEq(t, `{"who":"A"}`, string(ms[0].Payload))
	require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
	require.Empty(t, b.qDrain(t, b.Pool, topic, "c2", 10), "nothing is delivered twice")
}

// 20 producers interleave their publishes in open transactions and then
// commit or roll back in random order while two consumers read and ack
// concurrently: every committed message is delivered exactly once, no
// rolled-back message ever is.
func TestQueueOutOfOrderCommitManyProducers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "ooo.many"
	b.createTopic(t, b.Pool, topic)
	const producers, rounds = 20, 5
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))

	txs := make([]pgx.Tx, producers)
	for i := range txs {
		tx, err := b.Conn(t).Begin(b.ctx)
		require.NoError(t, err)
		txs[i] = tx
	}
	// Consumers run for the whole test.
	var (
		mu        sync.Mutex
		delivered []int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		errs      = make(chan error, 2)
	)
	seen := map[int64]bool{}
	for c := 0; c < 2; c++ {
		conn := b.Conn(t)
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			stopping, empty := false, 0
			for {
				ms, err := readMsgs(b.ctx, conn, topic, nil, name, 7, "5 minutes")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, m := range ms {
					if seen[m.MessageID] && err == nil {
						err = fmt.Errorf("a message was delivered twice")
					}
					seen[m.MessageID] = true
				}
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
				if len(ms) > 0 {
					empty = 0
					var n int
					if err := conn.QueryRow(b.ctx, "SELECT fanout.ack($1)", ms[0].LeaseID).Scan(&n); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					delivered = append(delivered, ids(ms)...)
					mu.Unlock()
					continue
				}
				if stopping {
					if empty++; empty >= 2 {
						return
					}
					continue
				}
				select {
				case <-stop:
					stopping = true
				case <-time.After(5 * time.Millisecond):
				}
			}
		}(string(rune('a' + c)))
	}

	// Interleaved publishes: each round every producer publishes once, in a
	// random order, so ids and txids interleave across transactions.
	mine := make([][]int64, producers)
	for r := 0; r < rounds; r++ {
		for _, p := range rng.Perm(producers) {
			mine[p] = append(mine[p], b.publish(t, txs[p], topic, `{"p":1}`))
		}
	}
	// Random commit order; about a third roll back.
	var committed, rolledBack []int64
	for _, p := range rng.Perm(producers) {
		if rng.IntN(3) == 0 {
			require.NoError(t, txs[p].Rollback(b.ctx))
			rolledBack = append(rolledBack, mine[p]...)
		} else {
			require.NoError(t, txs[p].Commit(b.ctx))
			committed = append(committed, mine[p]...)
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d committed, %d rolled back", len(committed), len(rolledBack))
	require.NotEmpty(t, committed)
	qSameSet(t, committed, delivered, "delivered vs committed")
	got := make(map[int64]bool, len(delivered))
	for _, id := range delivered {
		got[id] = true
	}
	for _, id := range rolledBack {
		require.False(t, got[id], "a rolled-back message was delivered")
	}
}

// Invariant 3 (docs/design.md §3.3): a transaction holding an xid open (on an unrelated table) does
// not delay messages other transactions commit meanwhile: all 1,000 arrive
// while it is still open.
func TestQueueLongTransactionDoesNotStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "long.tx"
	b.createTopic(t, b.Pool, topic)
	_, err := b.Pool.Exec(b.ctx, "CREATE TABLE unrelated (x int)")
	require.NoError(t, err)

	long := b.Conn(t)
	ltx, err := long.Begin(b.ctx)
	require.NoError(t, err)
	defer ltx.Rollback(b.ctx) //nolint:errcheck
	_, err = ltx.Exec(b.ctx, "INSERT INTO unrelated VALUES (1)")
	require.NoError(t, err)
	var longXid string
	require.NoError(t, ltx.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text").Scan(&longXid))

	// 4 producers publish 250 messages each, one per transaction, while a
	// consumer reads and acks.
	const total = 1000
	var (
		pubWG     sync.WaitGroup
		published = make(chan int64, total)
		pubErrs   = make(chan error, 4)
	)
	for p := 0; p < 4; p++ {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			for i := 0; i < total/4; i++ {
				var id int64
				if err := b.Pool.QueryRow(b.ctx, "SELECT fanout.publish($1, '{}')", topic).Scan(&id); err != nil {
					pubErrs <- err
					return
				}
				published <- id
			}
		}()
	}
	var lastCommit time.Time
	pubDone := make(chan struct{})
	go func() {
		pubWG.Wait()
		lastCommit = time.Now()
		close(pubDone)
	}()

	consumer := b.Conn(t)
	var delivered []int64
	emptyAfterDone := 0
	for len(delivered) < total {
		done := false
		select {
		case <-pubDone:
			done = true
		default:
		}
		ms := b.read(t, consumer, topic, nil, "c", 100, "5 minutes")
		if len(ms) == 0 {
			select {
			case err := <-pubErrs:
				require.NoError(t, err)
			default:
			}
			if done {
				// Everything is committed, and a read takes a fresh snapshot:
				// an empty page now means messages were skipped.
				emptyAfterDone++
				require.Less(t, emptyAfterDone, 2,
					"only %d of %d messages arrived; the rest were skipped", len(delivered), total)
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		require.Equal(t, len(ms), b.ack(t, consumer, ms[0].LeaseID, nil))
		delivered = append(delivered, ids(ms)...)
	}
	<-pubDone
	t.Logf("all %d messages read %v after the last publish committed (the long transaction still open)",
		total, time.Since(lastCommit))
	close(published)
	var want []int64
	for id := range published {
		want = append(want, id)
	}
	qSameSet(t, want, delivered, "delivered vs published")

	// The long transaction was open the whole time: it is still running and
	// still in everybody's snapshot.
	var running bool
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		"SELECT $1::xid8 = ANY (ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())))", longXid).Scan(&running))
	require.True(t, running, "the long transaction is still open")
	var again string
	require.NoError(t, ltx.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text").Scan(&again))
	require.Equal(t, longXid, again)
}
