package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// kindProducers publish to the topics of the newer kinds, one goroutine
// (one connection, one transaction at a time) per topic:
//
//   - key partitions: 1 to 3 messages per transaction, each of one of 16
//     keys, numbered per key (M lines: the key and its number); one
//     goroutine owns every key, so a key's transactions never overlap and
//     commit order is number order;
//   - sequences (two goroutines sharing 12 aggregates): per aggregate, new
//     sequences are introduced a few at a time and published in shuffled
//     order, some left as gaps that a later transaction fills (also in
//     shuffled order), some rolled back (and published again later); a
//     transaction with an unknown outcome is published again too (the
//     sequence dedupes it). On stop every gap is filled, so every aggregate
//     can drain;
//   - the misc queue: delayed messages (deliver_at up to 4 s ahead; M line:
//     due), priorities 0..9, and dedupe keys: a publish whose outcome is
//     unknown, or (one in five) whose COMMIT returned OK but whose
//     connection the producer then drops as if the reply had been lost, is
//     retried with the same key until one commits: each key must be one
//     message.
type kindProducers struct {
	url      string
	rate     float64 // transactions per second per topic
	rollback int
	runDir   string
	log      *slog.Logger
	kpart    string
	seq      string
	misc     string

	committed, rolledBack, unknown, messages atomic.Int64
	seqs                                     seqState
	hold                                     sync.Mutex // held by the key-partition producer per transaction
	cancel                                   context.CancelFunc
	wg                                       sync.WaitGroup
}

// kmsg is one message of a producer transaction.
type kmsg struct {
	sql   string // SELECT fanout.publish(...) with $1 topic, $2 payload, $3.. args
	args  []any
	ident string // "-" or the message's identity
	order string // "-" or key / aggregate
	n     int64
	due   int64
	prio  int // -1: not judged
}

func (p *kindProducers) start(ctx context.Context) error {
	ctx, p.cancel = context.WithCancel(ctx)
	loops := map[string]func(context.Context, *kconn){"kpart": p.kpartLoop, "seq1": p.seqLoop, "seq2": p.seqLoop,
		"misc": p.miscLoop}
	for name, loop := range loops {
		rec, err := newRecorder(filepath.Join(p.runDir, "pk-"+name+".rec"))
		if err != nil {
			p.cancel()
			return err
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer rec.Close()
			kc := &kconn{p: p, name: name, rec: rec}
			defer kc.close()
			loop(ctx, kc)
		}()
	}
	return nil
}

func (p *kindProducers) stop() {
	p.cancel()
	p.wg.Wait()
}

// filled reports whether the sequence producers left no gap.
func (p *kindProducers) filled() bool {
	p.seqs.mu.Lock()
	defer p.seqs.mu.Unlock()
	for _, pend := range p.seqs.pending {
		if len(pend) > 0 {
			return false
		}
	}
	return true
}

// kconn is one producer goroutine's connection and record file.
type kconn struct {
	p    *kindProducers
	name string
	rec  *recorder
	conn *pgx.Conn
	seq  int
}

func (k *kconn) close() {
	if k.conn != nil {
		k.conn.Close(context.Background())
		k.conn = nil
	}
}

// tick waits for the next transaction's turn; false once ctx is done.
func (k *kconn) tick(ctx context.Context, t *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publish runs one transaction of msgs on topic, records it and returns its
// outcome ('C', 'R' or 'U'); dropAfter closes the connection after a
// successful COMMIT (as if its reply had been lost) and reports 'U'.
func (k *kconn) publish(ctx context.Context, topic string, msgs []kmsg, rollback, dropAfter bool) (byte, error) {
	if k.conn == nil {
		cfg, err := pgx.ParseConfig(k.p.url)
		if err != nil {
			return 0, err
		}
		cfg.ConnectTimeout = 3 * time.Second
		cfg.RuntimeParams["application_name"] = "chaos-pk-" + k.name
		if k.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			k.conn = nil
			return 'X', nil // not started
		}
	}
	k.seq++
	txn := fmt.Sprintf("pk%s-%d", k.name, k.seq)
	lines := []string{line("B", txn, topic, len(msgs))}
	for j, m := range msgs {
		lines = append(lines, line("M", txn, j, m.ident, m.order, m.n, m.due, m.prio))
	}
	if err := k.rec.write(lines...); err != nil {
		return 0, err
	}
	outcome, err := k.txn(txn, topic, msgs, rollback)
	if outcome == 'C' && dropAfter {
		k.close()
	}
	switch outcome {
	case 'C':
		k.p.committed.Add(1)
		k.p.messages.Add(int64(len(msgs)))
		err = k.rec.write(line("C", txn, time.Now().UnixNano()))
	case 'R':
		k.p.rolledBack.Add(1)
		err = k.rec.write(line("R", txn))
	default:
		k.p.unknown.Add(1)
		_ = k.rec.write(line("U", txn, err))
		k.close()
		err = nil
	}
	if outcome == 'C' && dropAfter {
		outcome = 'U'
	}
	return outcome, err
}

func (k *kconn) txn(txn, topic string, msgs []kmsg, rollback bool) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx, err := k.conn.Begin(ctx)
	if err != nil {
		return 'U', err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO chaos.txn VALUES ($1)`, txn); err != nil {
		return 'U', err
	}
	for j, m := range msgs {
		payload, _ := json.Marshal(map[string]string{"k": fmt.Sprintf("%s.%d", txn, j)})
		if _, err := tx.Exec(ctx, m.sql, append([]any{topic, string(payload)}, m.args...)...); err != nil {
			return 'U', err
		}
	}
	if rollback {
		if err := tx.Rollback(ctx); err != nil {
			return 'U', err
		}
		return 'R', nil
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return 'U', err
	}
	return 'C', nil
}

func (p *kindProducers) ticker() *time.Ticker {
	return time.NewTicker(time.Duration(float64(time.Second) / p.rate))
}

func (p *kindProducers) rolls() bool { return rand.IntN(100) < p.rollback }

// kpartLoop: per-key numbered messages on the key-partitioned topic.
func (p *kindProducers) kpartLoop(ctx context.Context, k *kconn) {
	t := p.ticker()
	defer t.Stop()
	next := map[string]int64{}
	for k.tick(ctx, t) {
		var msgs []kmsg
		for range 1 + rand.IntN(3) {
			key := fmt.Sprintf("key-%d", rand.IntN(16))
			next[key]++
			msgs = append(msgs, kmsg{sql: `SELECT fanout.publish($1, $2::jsonb, message_group => $3)`,
				args: []any{key}, ident: "-", order: key, n: next[key], prio: -1})
		}
		p.hold.Lock() // (events.go: alter_topic waits for the groups with it)
		_, err := k.publish(ctx, p.kpart, msgs, p.rolls(), false)
		p.hold.Unlock()
		if err != nil {
			p.log.Error("producer: record", "error", err)
			return
		}
	}
}

// seqState is the sequence producers' shared view of the aggregates.
type seqState struct {
	mu      sync.Mutex
	hi      [seqAggregates]int64
	pending [seqAggregates][]int64 // introduced, not known committed
}

const seqAggregates = 12

// seqLoop: per-aggregate sequences, out of order, with gaps filled later.
// Two of them share the aggregates, so their transactions interleave on one
// aggregate (the same sequence from both: the second waits for the first
// and returns its id; two that publish an aggregate's sequences in opposite
// orders may deadlock: one fails, its sequences stay pending).
func (p *kindProducers) seqLoop(ctx context.Context, k *kconn) {
	t := time.NewTicker(time.Duration(2 * float64(time.Second) / p.rate)) // (two loops)
	defer t.Stop()
	st := &p.seqs
	msg := func(a int, n int64) kmsg {
		agg := fmt.Sprintf("agg-%d", a)
		return kmsg{sql: `SELECT fanout.publish($1, $2::jsonb, message_group => $3, sequence => $4)`,
			args: []any{agg, n}, ident: fmt.Sprintf("seq:%s/%d", agg, n), order: agg, n: n, prio: -1}
	}
	publish := func(ctx context.Context, a int, ns []int64, rollback bool) error {
		rand.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
		msgs := make([]kmsg, len(ns))
		for i, n := range ns {
			msgs[i] = msg(a, n)
		}
		outcome, err := k.publish(ctx, p.seq, msgs, rollback, false)
		if outcome == 'C' {
			st.mu.Lock()
			st.pending[a] = slices.DeleteFunc(st.pending[a], func(n int64) bool { return slices.Contains(ns, n) })
			st.mu.Unlock()
		}
		return err
	}
	for k.tick(ctx, t) {
		a := rand.IntN(seqAggregates)
		var ns []int64
		st.mu.Lock()
		if pend := st.pending[a]; len(pend) > 0 && (rand.IntN(2) == 0 || len(pend) > 5) {
			// Fill gaps: up to two of the pending sequences.
			for _, i := range rand.Perm(len(pend))[:min(2, len(pend))] {
				ns = append(ns, pend[i])
			}
		} else {
			// Introduce 1..3 new sequences; publish a random part of them now.
			for range 1 + rand.IntN(3) {
				st.hi[a]++
				st.pending[a] = append(st.pending[a], st.hi[a])
				if rand.IntN(3) > 0 {
					ns = append(ns, st.hi[a])
				}
			}
		}
		st.mu.Unlock()
		if len(ns) == 0 {
			continue
		}
		if err := publish(ctx, a, ns, p.rolls()); err != nil {
			p.log.Error("producer: record", "error", err)
			return
		}
	}
	// Fill every gap (not cancelled with ctx; bounded).
	fill, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for fill.Err() == nil {
		left := 0
		for a := range seqAggregates {
			st.mu.Lock()
			ns := slices.Clone(st.pending[a])
			st.mu.Unlock()
			if len(ns) == 0 {
				continue
			}
			left++
			if err := publish(fill, a, ns, false); err != nil {
				p.log.Error("producer: record", "error", err)
				return
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-fill.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	p.log.Error("producer: sequence gaps not filled at the end", "producer", k.name)
}

// miscLoop: delayed, prioritized and deduplicated messages on the misc queue.
func (p *kindProducers) miscLoop(ctx context.Context, k *kconn) {
	t := p.ticker()
	defer t.Stop()
	var retry []string // dedupe keys whose publish must be retried
	keys := 0
	for k.tick(ctx, t) {
		var msgs []kmsg
		dropAfter := false
		var dd string
		switch r := rand.IntN(10); {
		case len(retry) > 0 && r < 5:
			dd, retry = retry[0], retry[1:]
		case r < 4:
			// (timestamptz holds microseconds: the server's deliver_at
			// is exactly the recorded due)
			due := time.Now().Add(time.Duration(rand.IntN(4000)) * time.Millisecond).Truncate(time.Microsecond)
			msgs = append(msgs, kmsg{sql: `SELECT fanout.publish($1, $2::jsonb, deliver_at => $3)`,
				args: []any{due}, ident: "-", order: "-", due: due.UnixNano(), prio: -1})
		case r < 7:
			keys++
			dd = fmt.Sprintf("dd-%d", keys)
			dropAfter = rand.IntN(5) == 0
		default:
			prio := rand.IntN(10)
			for range 1 + rand.IntN(3) {
				msgs = append(msgs, kmsg{sql: `SELECT fanout.publish($1, $2::jsonb, priority => $3)`,
					args: []any{prio}, ident: "-", order: "-", prio: prio})
			}
		}
		if dd != "" {
			msgs = append(msgs, kmsg{sql: `SELECT fanout.publish($1, $2::jsonb, dedupe_key => $3)`,
				args: []any{dd}, ident: "dd:" + dd, order: "-", prio: 0})
		}
		outcome, err := k.publish(ctx, p.misc, msgs, dd == "" && p.rolls(), dropAfter)
		if err != nil {
			p.log.Error("producer: record", "error", err)
			return
		}
		if dd != "" && outcome != 'C' {
			retry = append(retry, dd)
		}
	}
}
