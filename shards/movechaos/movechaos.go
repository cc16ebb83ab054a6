// Package movechaos is the chaos scenario of a topic move (a test harness,
// not part of the production binary): a pubsub topic moves to another shard
// under traffic while the move is broken twice, and a verifier checks every
// delivery. It is run by the Go test TestShardsMoveChaos and by
// `make chaos` (cmd/pgq-chaos, scenario "move").
//
// The scenario: two producers (single messages and batches of 10), two
// groups of two consumers (a 2 s lease; every 7th page dropped unacked, as
// a consumer that died holding it). After 300 messages the mover's
// connection to the old shard is terminated while it seals (a transaction
// holds the topic's message table, so the seal waits, and is killed
// there); the old shard is stopped at once (Crash) while the groups drain
// it, and started again (Restart) after 200 more messages; the move is run
// again (the old shard then refuses publishes, PGQ26) and 200 more
// messages go to the new shard; FinishMove ends it once the groups drained.
//
// The verifier: every message a producer was told was published reaches
// every group (lost), and no message is delivered again by a read that
// began after its ack succeeded (after-ack duplicates). Deliveries again of
// unacked messages (dropped pages, acks that failed on the downed shard,
// leases the shard lost in its crash) are what at-least-once allows; they
// are counted apart.
package movechaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfanout/pgq/client"
	"github.com/pgfanout/pgq/shards"
)

// Config is one run of the scenario.
type Config struct {
	// DirectoryURL is the directory database; the topic's placement names
	// the old shard, To is a registered shard to move it to.
	DirectoryURL string
	// OldShardURL is the pgq database of the shard that holds Topic.
	OldShardURL string
	Topic, To   string
	// Crash stops the old shard's cluster at once; Restart starts it again.
	Crash, Restart func(ctx context.Context) error
	// Wait is the longest wait for each step (default 2 minutes).
	Wait time.Duration
}

// Groups are the scenario's consumer groups.
var Groups = []string{"g1", "g2"}

// GroupResult is the verifier's count for one group.
type GroupResult struct {
	Group string
	// Lost: published messages the group never got.
	Lost int
	// Duplicates: deliveries beyond the first (of unacked messages, or
	// counted in AfterAck as well).
	Duplicates int
}

// Result is what the verifier found.
type Result struct {
	Published int // messages producers were told were published
	Groups    []GroupResult
	// AfterAck: deliveries by reads that began after the message's ack
	// succeeded (each is a violation); Violations names the first ones.
	AfterAck   int
	Violations []string
	// Dropped pages, failed acks and failed publishes (the causes of
	// redeliveries and of messages not counted as published).
	Dropped, AckErrors, PubErrors int64
}

// Lost is the lost messages of every group.
func (r Result) Lost() int {
	n := 0
	for _, g := range r.Groups {
		n += g.Lost
	}
	return n
}

// deliveryLog records, per group, which message keys producers were told
// were published, every delivery, and when each key's ack succeeded.
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

// duplicates counts group g's deliveries beyond the first of each key.
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

// Run runs the scenario. An error means a step could not be carried out
// (or timed out); what the verifier found is in Result either way.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.Wait == 0 {
		cfg.Wait = 2 * time.Minute
	}
	admin, err := client.NewSharded(ctx, cfg.DirectoryURL)
	if err != nil {
		return res, fmt.Errorf("movechaos: directory: %w", err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, cfg.Topic, "pubsub"); err != nil {
		return res, fmt.Errorf("movechaos: create topic: %w", err)
	}
	for _, g := range Groups {
		if _, err := admin.Subscribe(ctx, cfg.Topic, g); err != nil {
			return res, fmt.Errorf("movechaos: subscribe %s: %w", g, err)
		}
	}
	vl := newDeliveryLog(Groups)
	var count, pubErrors, dropped, ackErrors atomic.Int64
	var failure atomic.Pointer[error] // a producer's or consumer's own failure
	fail := func(err error) { failure.CompareAndSwap(nil, &err) }
	defer func() {
		res.Dropped, res.AckErrors, res.PubErrors = dropped.Load(), ackErrors.Load(), pubErrors.Load()
	}()

	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	var pw sync.WaitGroup
	for p := 0; p < 2; p++ {
		sc, err := client.NewSharded(ctx, cfg.DirectoryURL, client.WithDirectoryRefresh(20*time.Millisecond))
		if err != nil {
			return res, fmt.Errorf("movechaos: producer: %w", err)
		}
		defer sc.Close()
		pw.Add(1)
		go func(p int, sc *client.Sharded) {
			defer pw.Done()
			for k := 0; prodCtx.Err() == nil; k++ {
				var keys []string
				var err error
				if k%2 == 0 {
					keys = []string{fmt.Sprintf("p%d-%d", p, k)}
					_, err = sc.Publish(prodCtx, cfg.Topic, client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[0]))})
				} else {
					msgs := make([]client.Message, 10)
					for i := range msgs {
						keys = append(keys, fmt.Sprintf("p%d-%d-%d", p, k, i))
						msgs[i] = client.Message{Payload: json.RawMessage(fmt.Sprintf(`{"k":%q}`, keys[i]))}
					}
					_, err = sc.PublishBatch(prodCtx, cfg.Topic, msgs)
				}
				if err != nil {
					// The old shard crashed under a stale route: the
					// outcome is unknown, the keys are not counted (a copy
					// that committed is an extra, not a loss).
					if prodCtx.Err() == nil {
						pubErrors.Add(1)
						time.Sleep(5 * time.Millisecond)
					}
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
	for _, g := range Groups {
		for c := 0; c < 2; c++ {
			sc, err := client.NewSharded(ctx, cfg.DirectoryURL, client.WithDirectoryRefresh(20*time.Millisecond),
				client.WithShardedLogger(quiet)) // a read of the downed shard warns each time
			if err != nil {
				return res, fmt.Errorf("movechaos: consumer: %w", err)
			}
			defer sc.Close()
			cw.Add(1)
			go func(g string, c int, sc *client.Sharded) {
				defer cw.Done()
				for n := 0; conCtx.Err() == nil; n++ {
					start := vl.tick()
					page, err := sc.Read(conCtx, cfg.Topic, client.ReadOptions{Group: g, Consumer: fmt.Sprintf("c%d", c),
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
							fail(fmt.Errorf("movechaos: payload %s: %w", m.Payload, err))
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

	// Before the clients close (deferred above): the producers and
	// consumers stop.
	defer func() {
		stopProd()
		stopCon()
		pw.Wait()
		cw.Wait()
	}()

	waitFor := func(what string, cond func() (bool, error)) error {
		deadline := time.Now().Add(cfg.Wait)
		for {
			ok, err := cond()
			if err != nil {
				return fmt.Errorf("movechaos: waiting for %s: %w", what, err)
			}
			if ok {
				return nil
			}
			if f := failure.Load(); f != nil {
				return fmt.Errorf("movechaos: waiting for %s: %w", what, *f)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("movechaos: waited %s for %s", cfg.Wait, what)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	atLeast := func(n int64) func() (bool, error) {
		return func() (bool, error) { return count.Load() >= n, nil }
	}
	if err := waitFor("300 messages before the move", atLeast(300)); err != nil {
		return res, err
	}
	dir, err := pgx.Connect(ctx, cfg.DirectoryURL)
	if err != nil {
		return res, fmt.Errorf("movechaos: directory: %w", err)
	}
	defer dir.Close(context.WithoutCancel(ctx))
	if err := steps(ctx, cfg, dir, waitFor, &count); err != nil {
		return res, err
	}
	stopProd()
	pw.Wait()
	if err := waitFor("the move to finish", func() (bool, error) { return shards.FinishMove(ctx, dir, cfg.Topic) }); err != nil {
		return res, err
	}
	err = waitFor("every group to get every message", func() (bool, error) {
		for _, g := range Groups {
			if vl.missing(g) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	stopCon()
	cw.Wait()

	vl.mu.Lock()
	res.Published = len(vl.published)
	res.AfterAck = len(vl.violations)
	res.Violations = append([]string(nil), vl.violations[:min(len(vl.violations), 10)]...)
	vl.mu.Unlock()
	for _, g := range Groups {
		res.Groups = append(res.Groups, GroupResult{Group: g, Lost: vl.missing(g), Duplicates: vl.duplicates(g)})
	}
	return res, err
}

// steps breaks the move twice and resumes it: the mover killed in its
// seal (its own directory connection), the old shard stopped at once and
// started again, the move run again (on dir2).
func steps(ctx context.Context, cfg Config, dir2 *pgx.Conn, waitFor func(string, func() (bool, error)) error, count *atomic.Int64) error {
	// 1. The mover dies while sealing the old shard: a transaction holds
	// the topic's message table (as a long publish would), the seal waits
	// for it, and the mover's connection is terminated there.
	oldConn, err := pgx.Connect(ctx, cfg.OldShardURL)
	if err != nil {
		return fmt.Errorf("movechaos: old shard: %w", err)
	}
	defer oldConn.Close(context.WithoutCancel(ctx))
	var table string
	if err := oldConn.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, cfg.Topic).Scan(&table); err != nil {
		return fmt.Errorf("movechaos: the topic's table: %w", err)
	}
	holder, err := oldConn.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := holder.Exec(ctx, `LOCK TABLE fanout_data.`+pgx.Identifier{table}.Sanitize()+` IN ROW EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("movechaos: hold the topic's table: %w", err)
	}
	dir, err := pgx.Connect(ctx, cfg.DirectoryURL)
	if err != nil {
		return fmt.Errorf("movechaos: directory: %w", err)
	}
	defer dir.Close(context.WithoutCancel(ctx))
	moveErr := make(chan error, 1)
	go func() { moveErr <- shards.Move(ctx, dir, cfg.Topic, cfg.To) }()
	killer, err := pgx.Connect(ctx, cfg.OldShardURL)
	if err != nil {
		return fmt.Errorf("movechaos: old shard: %w", err)
	}
	defer killer.Close(context.WithoutCancel(ctx))
	err = waitFor("the mover to wait in its seal", func() (bool, error) {
		var n int
		err := killer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE query LIKE '%fanout_shard.seal%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return n > 0, err
	})
	if err != nil {
		return err
	}
	if err := <-moveErr; err == nil {
		return errors.New("movechaos: the move succeeded although its connection was terminated in the seal")
	}
	if err := holder.Rollback(ctx); err != nil {
		return err
	}
	_ = killer.Close(ctx)
	_ = oldConn.Close(ctx)
	var shard string
	if err := dir2.QueryRow(ctx, `SELECT shard FROM fanout_directory.shard_for($1)`, cfg.Topic).Scan(&shard); err != nil {
		return fmt.Errorf("movechaos: placement: %w", err)
	}
	if shard != cfg.To {
		return fmt.Errorf("movechaos: the directory names shard %q, want %q (it switches before the seal)", shard, cfg.To)
	}

	// 2. The old shard stops at once while the groups drain it (right
	// after the mover died: pages of it are leased), and starts again: the
	// leases it held come back after they expire.
	if err := cfg.Crash(ctx); err != nil {
		return fmt.Errorf("movechaos: crash the old shard: %w", err)
	}
	atCrash := count.Load()
	if err := waitFor("200 messages while the old shard is down", func() (bool, error) {
		return count.Load() >= atCrash+200, nil
	}); err != nil {
		return err
	}
	if err := cfg.Restart(ctx); err != nil {
		return fmt.Errorf("movechaos: restart the old shard: %w", err)
	}

	// 3. Running the move again completes it: the old shard is sealed.
	if err := shards.Move(ctx, dir2, cfg.Topic, cfg.To); err != nil {
		return fmt.Errorf("movechaos: the move run again: %w", err)
	}
	connOld, err := pgx.Connect(ctx, cfg.OldShardURL)
	if err != nil {
		return fmt.Errorf("movechaos: old shard: %w", err)
	}
	defer connOld.Close(context.WithoutCancel(ctx))
	var id int64
	err = connOld.QueryRow(ctx, `SELECT fanout.publish($1, '{}')`, cfg.Topic).Scan(&id)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != client.CodeNotOnShard {
		return fmt.Errorf("movechaos: a publish on the old shard after the move: want %s, got %v", client.CodeNotOnShard, err)
	}
	atResume := count.Load()
	return waitFor("200 messages after the move resumed", func() (bool, error) {
		return count.Load() >= atResume+200, nil
	})
}
