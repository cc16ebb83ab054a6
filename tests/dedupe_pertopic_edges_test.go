package tests

// A hostile review of the table of dedupe keys per topic
// (fanout_data.m<id>_dedupe): m<id>_insert_claimed / m<id>_claim /
// m<id>_insert_keyed, fanout._publish_sequenced, the sweep of
// fanout._cleanup_bookkeeping over the topics, fanout.maint_operations,
// fanout.drop_topic and fanout.check_consistency.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// dpPublisher publishes one payload with dedupe key key (and sequence seq
// on a sequence-ordered topic, message_group 'agg') through one path.
type dpPublisher struct {
	name string
	seq  bool // needs a sequence-ordered topic
	run  func(ctx context.Context, q querier, topic, key string, seq int64) (int64, error)
}

var dpPaths = []dpPublisher{
	{"single", false, func(ctx context.Context, q querier, topic, key string, _ int64) (int64, error) {
		var id int64
		err := q.QueryRow(ctx, `SELECT fanout.publish($1, '{"p":1}', dedupe_key => $2)`, topic, key).Scan(&id)
		return id, err
	}},
	{"single-prio", false, func(ctx context.Context, q querier, topic, key string, _ int64) (int64, error) {
		var id int64
		err := q.QueryRow(ctx, `SELECT fanout.publish($1, '{"p":1}', dedupe_key => $2, priority => 3, delay => '0 seconds')`,
			topic, key).Scan(&id)
		return id, err
	}},
	{"batch", false, func(ctx context.Context, q querier, topic, key string, _ int64) (int64, error) {
		got, err := rvKeyed(ctx, q, topic, []*string{&key, &key})
		if err != nil {
			return 0, err
		}
		if got[0] != got[1] {
			return 0, fmt.Errorf("a key repeated in the batch got two ids: %v", got)
		}
		return got[0], nil
	}},
	{"single-seq", true, func(ctx context.Context, q querier, topic, key string, seq int64) (int64, error) {
		var id int64
		err := q.QueryRow(ctx, `SELECT fanout.publish($1, '{"p":1}', message_group => 'agg', dedupe_key => $2, sequence => $3)`,
			topic, key, seq).Scan(&id)
		return id, err
	}},
	{"batch-seq", true, func(ctx context.Context, q querier, topic, key string, seq int64) (int64, error) {
		got, err := rvBatch(ctx, q, `SELECT fanout.publish_batch($1, ARRAY['{"p":1}']::jsonb[],
			message_groups => ARRAY['agg'], dedupe_keys => ARRAY[$2], sequences => ARRAY[$3::bigint])`, topic, key, seq)
		if err != nil {
			return 0, err
		}
		return got[0], nil
	}},
}

func (b *bundle) dpConsistent(t *testing.T) {
	t.Helper()
	rows, err := b.Pool.Query(b.ctx, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`)
	require.NoError(t, err)
	issues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, issues)
}

func (b *bundle) dpTopicID(t *testing.T, topic string) int64 {
	t.Helper()
	return b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = $1`, topic)
}

// Two publishers of one key, every pair of paths, the first holding its
// transaction open: the second waits, then gets the first one's id (commit)
// or takes the key (rollback); one message per key; under REPEATABLE READ
// the waiter's wait ends in 40001 when the holder commits.
func TestDedupePerTopicConcurrentPaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.plain")
	b.createTopic(t, b.Pool, "dp.seq", "sequence_ordering => true")
	holder, waiter := b.Conn(t), b.Conn(t)
	seq := int64(0)
	for _, h := range dpPaths {
		for _, w := range dpPaths {
			if h.seq != w.seq {
				continue
			}
			topic := "dp.plain"
			if h.seq {
				topic = "dp.seq"
			}
			for _, mode := range []string{"commit", "rollback", "rr-commit", "rr-rollback"} {
				key := fmt.Sprintf("k;'\"%s/%s/%s", h.name, w.name, mode)
				seq++
				before := b.qMessageCount(t, topic)
				tx, err := holder.Begin(b.ctx)
				require.NoError(t, err)
				hid, err := h.run(b.ctx, tx, topic, key, seq)
				require.NoError(t, err, "%s holder %s", key, h.name)
				done := make(chan error, 1)
				var wid int64
				go func() {
					var e error
					if strings.HasPrefix(mode, "rr-") {
						wtx, e2 := waiter.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
						if e2 != nil {
							done <- e2
							return
						}
						wid, e = w.run(b.ctx, wtx, topic, key, seq)
						if e != nil {
							_ = wtx.Rollback(b.ctx)
						} else {
							e = wtx.Commit(b.ctx)
						}
					} else {
						wid, e = w.run(b.ctx, waiter, topic, key, seq)
					}
					done <- e
				}()
				b.tWaitBlocked(t, waiter)
				if strings.HasSuffix(mode, "commit") {
					require.NoError(t, tx.Commit(b.ctx))
					err := <-done
					if mode == "rr-commit" {
						requireSQLState(t, err, "40001")
						wid, err = w.run(b.ctx, waiter, topic, key, seq) // the retry
					}
					require.NoError(t, err, key)
					require.Equal(t, hid, wid, key)
				} else {
					require.NoError(t, tx.Rollback(b.ctx))
					require.NoError(t, <-done, key)
					require.NotEqual(t, hid, wid, key)
				}
				require.Equal(t, before+1, b.qMessageCount(t, topic), key)
				require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, topic)+
					` WHERE dedupe_key = $1 AND message_id = $2`, key, wid), key)
			}
		}
	}
	b.dpConsistent(t)
}

// Keys past the window are taken over on every path (new id, new message,
// the row points at it); keys within it are not.
func TestDedupePerTopicWindowTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.win", "dedupe_window => '10 minutes'")
	b.createTopic(t, b.Pool, "dp.win.seq", "dedupe_window => '10 minutes'", "sequence_ordering => true")
	seq := int64(0)
	for _, p := range dpPaths {
		topic := "dp.win"
		if p.seq {
			topic = "dp.win.seq"
		}
		key := "w-" + p.name
		seq++
		first, err := p.run(b.ctx, b.Pool, topic, key, seq)
		require.NoError(t, err)
		again, err := p.run(b.ctx, b.Pool, topic, key, seq)
		require.NoError(t, err)
		require.Equal(t, first, again, p.name)
		_, err = b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, topic)+` SET created_at = created_at - interval '11 minutes' WHERE dedupe_key = $1`, key)
		require.NoError(t, err)
		before := b.qMessageCount(t, topic)
		seq++ // a new sequence: the key alone decides
		taken, err := p.run(b.ctx, b.Pool, topic, key, seq)
		require.NoError(t, err)
		require.NotEqual(t, first, taken, "%s: an expired key is taken over", p.name)
		require.Equal(t, before+1, b.qMessageCount(t, topic), p.name)
		require.Equal(t, taken, b.count(t, `SELECT message_id FROM `+b.dedupeTable(t, topic)+` WHERE dedupe_key = $1`, key), p.name)
		again, err = p.run(b.ctx, b.Pool, topic, key, seq)
		require.NoError(t, err)
		require.Equal(t, taken, again, p.name)
	}
	b.dpConsistent(t)
}

// Keys with quotes, semicolons, backslashes, 512 multibyte characters on
// every path; 513 of them refused (PGQ03) on every path; NULL elements of a
// batch are plain messages.
func TestDedupePerTopicKeyStrings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.str")
	b.createTopic(t, b.Pool, "dp.str.seq", "sequence_ordering => true")
	seq := int64(100)
	for _, p := range dpPaths {
		topic := "dp.str"
		if p.seq {
			topic = "dp.str.seq"
		}
		for _, key := range []string{`'); DROP TABLE fanout.topic; --`, `a"b\c;`, strings.Repeat("é", 512), strings.Repeat("€", 512) + ""} {
			k := key
			if len([]rune(k)) < 512 {
				k = p.name + k
			} else {
				k = string([]rune(p.name + k)[:512])
			}
			seq++
			id1, err := p.run(b.ctx, b.Pool, topic, k, seq)
			require.NoError(t, err, p.name)
			seq++
			id2, err := p.run(b.ctx, b.Pool, topic, k, seq)
			require.NoError(t, err, p.name)
			require.Equal(t, id1, id2, p.name)
			require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, topic)+` WHERE dedupe_key = $1`, k))
		}
		seq++
		_, err := p.run(b.ctx, b.Pool, topic, strings.Repeat("é", 513), seq)
		requireSQLState(t, err, "PGQ03")
	}
	got, err := rvKeyed(b.ctx, b.Pool, "dp.str", rvKeys("<nil>", "n1", "<nil>", "n1"))
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, got[1], got[3])
	require.NotEqual(t, got[0], got[2])
	b.dpConsistent(t)
}

// A single keyed publish on a partitioned topic sets kpart from the
// topic's partition count, also after alter_topic raised it (the generated
// m<id>_insert_claimed is regenerated); a duplicate inserts nothing.
func TestDedupePerTopicPartitionedSingle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.part", "partitions => 4")
	tbl := b.table(t, "dp.part")
	pub := func(key, group string) int64 {
		var id int64
		var g *string
		if group != "" {
			g = &group
		}
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('dp.part', '{}', message_group => $2, dedupe_key => $1)`,
			key, g).Scan(&id))
		return id
	}
	for i := 0; i < 20; i++ {
		g := fmt.Sprintf("g%d", i)
		require.Equal(t, pub("k"+g, g), pub("k"+g, g))
	}
	require.Equal(t, int64(20), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` WHERE kpart IS DISTINCT FROM fanout._kpart_of(message_group, 4)`))
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('dp.part', partitions => 8)`)
	require.NoError(t, err)
	for i := 20; i < 40; i++ {
		g := fmt.Sprintf("g%d", i)
		require.Equal(t, pub("k"+g, g), pub("k"+g, g))
	}
	require.Equal(t, int64(40), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` WHERE id > (SELECT max(message_id) FROM `+
		b.dedupeTable(t, "dp.part")+` WHERE dedupe_key = 'kg19') AND kpart IS DISTINCT FROM fanout._kpart_of(message_group, 8)`))
	// no message_group: a kpart in range
	id := pub("nogroup", "")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` WHERE id = $1 AND kpart BETWEEN 0 AND 7`, id))
	b.dpConsistent(t)
}

// A duplicate single publish with a priority: nothing inserted, the first
// message is read once, no error.
func TestDedupePerTopicPriorityDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.prio")
	first := b.rvPub(t, b.Pool, "dp.prio", "p")
	var dup int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('dp.prio', '{}', dedupe_key => 'p', priority => 7)`).Scan(&dup))
	require.Equal(t, first, dup)
	require.Equal(t, int64(1), b.qMessageCount(t, "dp.prio"))
	ms := b.read(t, b.Pool, "dp.prio", nil, "c", 10, "30 seconds")
	require.Equal(t, []int64{first}, ids(ms))
	b.dpConsistent(t)
}

// Single publishes only, READ COMMITTED: A publishes key k (no priority)
// and keeps its transaction open; B publishes k with a priority (waits for
// A); A then publishes another key with a priority. Before the table per
// topic (claim first, then mark the topic prioritized) B waited for A and
// got A's id; now B marks the topic prioritized (row lock on fanout.topic)
// before its claim, and A's mark waits for B: a deadlock (40P01).
func TestDedupePerTopicPriorityMarkDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.prio.dl")
	a, bb := b.Conn(t), b.Conn(t)
	tx, err := a.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	held := b.rvPub(t, tx, "dp.prio.dl", "k")
	done := make(chan error, 1)
	var bid int64
	go func() {
		done <- bb.QueryRow(b.ctx, `SELECT fanout.publish('dp.prio.dl', '{}', dedupe_key => 'k', priority => 5)`).Scan(&bid)
	}()
	b.tWaitBlocked(t, bb)
	var other int64
	err = tx.QueryRow(b.ctx, `SELECT fanout.publish('dp.prio.dl', '{}', dedupe_key => 'j', priority => 5)`).Scan(&other)
	if err == nil {
		err = tx.Commit(b.ctx)
	}
	berr := <-done
	require.NoError(t, err, "the holder's second publish")
	require.NoError(t, berr, "the waiting duplicate publish")
	require.Equal(t, held, bid)
}

// The same with the waiting duplicate in a keyed publish_batch with a
// priority: the batch claims its keys before it marks the topic (as every
// publish path does), so the holder's own priority publish does not wait on
// it and no deadlock follows.
func TestDedupePerTopicPriorityMarkDeadlockBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.prio.dlb")
	a, bb := b.Conn(t), b.Conn(t)
	tx, err := a.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	held := b.rvPub(t, tx, "dp.prio.dlb", "k")
	done := make(chan error, 1)
	var bids []int64
	go func() {
		rows, e := bb.Query(b.ctx, `SELECT fanout.publish_batch('dp.prio.dlb', ARRAY['{}', '{}']::jsonb[],
			dedupe_keys => ARRAY['k', 'n'], priority => 5)`)
		if e == nil {
			bids, e = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		done <- e
	}()
	b.tWaitBlocked(t, bb)
	var other int64
	err = tx.QueryRow(b.ctx, `SELECT fanout.publish('dp.prio.dlb', '{}', dedupe_key => 'j', priority => 5)`).Scan(&other)
	if err == nil {
		err = tx.Commit(b.ctx)
	}
	berr := <-done
	require.NoError(t, err, "the holder's second publish")
	require.NoError(t, berr, "the waiting batch")
	require.Len(t, bids, 2)
	require.Equal(t, held, bids[0])
	require.NotEqual(t, held, bids[1])
	require.Equal(t, int64(3), b.qMessageCount(t, "dp.prio.dlb"))
	require.Equal(t, int64(1), b.count(t, `SELECT prioritized::int FROM fanout.topic WHERE topic = 'dp.prio.dlb'`))
}

// Tenant isolation: a producer with a grant on its own topic cannot read or
// write another topic's table of keys nor call its claim functions, nor its
// own (only through fanout.publish).
func TestDedupePerTopicTenantTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	name, conn := b.tRole(t, "dp_prod", "fanout_producer")
	b.tGrant(t, b.Pool, "a.%", name, "publish")
	a := b.createTopic(t, b.Pool, "a.t")
	o := b.createTopic(t, b.Pool, "b.t")
	b.rvPub(t, b.Pool, "b.t", "secret")
	var id int64
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT fanout.publish('a.t', '{}', dedupe_key => 'mine')`).Scan(&id))
	_, err := conn.Exec(b.ctx, `SELECT fanout.publish('b.t', '{}', dedupe_key => 'secret')`)
	requireSQLState(t, err, "PGQ21")
	for _, tid := range []int64{a, o} {
		for _, sql := range []string{
			fmt.Sprintf(`SELECT count(*) FROM fanout_data.m%d_dedupe`, tid),
			fmt.Sprintf(`DELETE FROM fanout_data.m%d_dedupe`, tid),
			fmt.Sprintf(`INSERT INTO fanout_data.m%d_dedupe VALUES ('x', 1, now())`, tid),
			fmt.Sprintf(`SELECT fanout_data.m%d_claim('secret', 1, '0 seconds')`, tid),
			fmt.Sprintf(`SELECT fanout_data.m%d_insert_claimed('secret', '0 seconds', '{}', '{}', NULL, NULL, NULL)`, tid),
			fmt.Sprintf(`SELECT fanout_data.m%d_insert_keyed(ARRAY['{}']::jsonb[], NULL, NULL, ARRAY['secret'], NULL, NULL, '0 seconds')`, tid),
		} {
			_, err := conn.Exec(b.ctx, sql)
			requireSQLState(t, err, "42501")
		}
	}
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "b.t")))
	require.Equal(t, int64(1), b.qMessageCount(t, "b.t"))
}

// The sweep over tables of 0 blocks, topics created and dropped (and
// re-created under the same name) mid-pass: every call moves on, the pass
// ends, expired keys of every live topic are gone (the re-created topic's
// too, in the same pass), fresh ones stay, maint_operations lists the
// cleanup while (and only while) a pass is under way or due.
func TestDedupePerTopicSweepPassState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	listed := func(at string) bool {
		return b.count(t, `SELECT count(*) FROM fanout.maint_operations(`+at+`) WHERE func = 'fanout._cleanup_bookkeeping'`) > 0
	}
	// No topic: nothing due.
	require.False(t, listed("now()"))
	for _, topic := range []string{"dp.s.empty1", "dp.s.a", "dp.s.empty2", "dp.s.b"} {
		b.createTopic(t, b.Pool, topic, "dedupe_window => '1 hour'")
	}
	require.True(t, listed("now()"), "the first pass is due once a topic exists")
	fill := func(topic string, n int, age string) {
		_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, topic)+` SELECT $2 || g, g, now() - $1::interval
			FROM generate_series(1, $3::int) g`, age, topic+"-"+age+"-", n)
		require.NoError(t, err)
	}
	fill("dp.s.a", 20000, "2 hours")
	fill("dp.s.a", 10, "1 minute")
	fill("dp.s.b", 20000, "2 hours")
	require.Greater(t, b.count(t, `SELECT pg_relation_size($1::regclass) / 8192`, b.dedupeTable(t, "dp.s.a")), int64(100))
	calls := 0
	for {
		n := b.count(t, `SELECT fanout._cleanup_bookkeeping()`)
		calls++
		if n == 0 {
			break
		}
		st := b.count(t, `SELECT coalesce(topic_id, 0) FROM fanout.dedupe_sweep`)
		if calls == 1 {
			require.Equal(t, b.dpTopicID(t, "dp.s.a"), st, "the 0-block table is passed by in the same call")
			require.True(t, listed("now()"))
			// Mid-pass: drop the swept topic and re-create it under its name,
			// drop an empty one, create a new one.
			_, err := b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic('dp.s.a', force => true)`)
			require.NoError(t, err)
			_, err = b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic('dp.s.empty2', force => true)`)
			require.NoError(t, err)
			b.createTopic(t, b.Pool, "dp.s.a", "dedupe_window => '1 hour'")
			fill("dp.s.a", 20000, "2 hours")
			fill("dp.s.a", 5, "1 minute")
			b.createTopic(t, b.Pool, "dp.s.c", "dedupe_window => '1 hour'")
			fill("dp.s.c", 50, "2 hours")
		}
		require.Less(t, calls, 1000)
	}
	require.Equal(t, int64(5), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.s.a")), "re-created topic swept in the same pass")
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.s.b")))
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.s.c")))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL OR topic_id IS NOT NULL`))
	require.False(t, listed("now()"), "pass over, the next not due")
	require.Zero(t, b.count(t, `SELECT fanout._cleanup_bookkeeping()`))
	require.True(t, listed("now() + interval '8 minutes'"), "due an eighth of the window later")
	// Every topic dropped: nothing listed, even when a pass would be due.
	for _, topic := range []string{"dp.s.empty1", "dp.s.a", "dp.s.b", "dp.s.c"} {
		_, err := b.Pool.Exec(b.ctx, `SELECT fanout.drop_topic($1, force => true)`, topic)
		require.NoError(t, err)
	}
	require.False(t, listed("now() + interval '2 hours'"))
	b.dpConsistent(t)
}

// A sweep call held open (its transaction not committed) keeps a drop of
// the swept topic waiting; after it commits the drop goes through and the
// next calls pass the dropped topic by.
func TestDedupePerTopicDropWaitsForSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.ds", "dedupe_window => '1 hour'")
	_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, "dp.ds")+` SELECT 'k' || g, g, now() - interval '2 hours'
		FROM generate_series(1, 30000) g`)
	require.NoError(t, err)
	sweeper, dropper := b.Conn(t), b.Conn(t)
	tx, err := sweeper.Begin(b.ctx)
	require.NoError(t, err)
	var n int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT fanout._cleanup_bookkeeping()`).Scan(&n))
	require.Positive(t, n)
	done := make(chan error, 1)
	go func() {
		_, e := dropper.Exec(b.ctx, `SELECT fanout.drop_topic('dp.ds', force => true)`)
		done <- e
	}()
	b.tWaitBlocked(t, dropper)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	for i := 0; ; i++ {
		require.Less(t, i, 100)
		if b.count(t, `SELECT fanout._cleanup_bookkeeping()`) == 0 {
			break
		}
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL`))
	b.dpConsistent(t)
}

// A drop of a topic whose transaction is still open (the topic's table of
// keys dropped, not yet committed): the sweep does not wait for it (it
// locks the topic row, without waiting, before it opens the table; sizing
// the table first waited for the drop's ACCESS EXCLUSIVE lock).
func TestDedupePerTopicSweepPassesDropInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.inflight")
	b.createTopic(t, b.Pool, "dp.other", "dedupe_window => '1 hour'")
	_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, "dp.other")+` VALUES ('old', 1, now() - interval '2 hours')`)
	require.NoError(t, err)
	dropper, sweeper := b.Conn(t), b.Conn(t)
	tx, err := dropper.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT fanout.drop_topic('dp.inflight', force => true)`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, e := sweeper.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping()`)
		done <- e
	}()
	blocked := b.tWaitBlockedOrDone(t, sweeper, done)
	require.NoError(t, tx.Rollback(b.ctx))
	require.NoError(t, <-done)
	require.False(t, blocked, "the sweep waited for an uncommitted drop_topic")
}

// The sweep and a drop of a topic deadlocked: the sweep deleted an old lease
// slot of the topic's group, then (after waiting for an unrelated member
// row) sized the topic's table of keys, which the drop held ACCESS
// EXCLUSIVE while it waited to delete that lease slot. Now the
// sweep waits for no row at all (lease slots and members another
// transaction holds are left to a later call, SKIP LOCKED), so the cycle
// cannot form: the sweep returns while the member row is held, the drop
// then waits only for the member row's holder, and both complete.
func TestDedupePerTopicSweepDropDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.dl")
	b.publish(t, b.Pool, "dp.dl", `{}`)
	ms := b.read(t, b.Pool, "dp.dl", nil, "c1", 10, "30 seconds")
	require.Len(t, ms, 1)
	require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, ids(ms)))
	const later = `now() + interval '8 days'` // the slot and the member are old then
	require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.lease WHERE open_count = 0 AND closed_at < `+later+` - interval '1 hour'`))
	require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.member WHERE last_seen < `+later+` - interval '7 days'`))
	locker, sweeper, dropper := b.Conn(t), b.Conn(t), b.Conn(t)
	ltx, err := locker.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = ltx.Rollback(b.ctx) }()
	_, err = ltx.Exec(b.ctx, `SELECT 1 FROM fanout.member FOR UPDATE`)
	require.NoError(t, err)
	sdone := make(chan error, 1)
	go func() {
		_, e := sweeper.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping(`+later+`)`)
		sdone <- e
	}()
	require.False(t, b.tWaitBlockedOrDone(t, sweeper, sdone), "the sweep waited for the member row")
	require.NoError(t, <-sdone, "the sweep")
	require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.member`), "the held member row is left to a later call")
	ddone := make(chan error, 1)
	go func() {
		_, e := dropper.Exec(b.ctx, `SELECT fanout.drop_topic('dp.dl', force => true)`)
		ddone <- e
	}()
	b.tWaitBlockedOrDone(t, dropper, ddone) // its tables dropped, waiting for the member row (cascade)
	require.NoError(t, ltx.Rollback(b.ctx))
	require.NoError(t, <-ddone, "the drop")
	_, err = sweeper.Exec(b.ctx, `SELECT fanout._cleanup_bookkeeping(`+later+`)`)
	require.NoError(t, err)
}

// An alter_topic in flight holds its topic's row: the sweep does not wait
// for it, and passes the topic by for this pass (waiting there, the pass
// stopped for every topic after it for as long as the alter stayed open: a
// tenant's transaction left open stopped other tenants' sweeps). Its
// expired keys are swept by the next pass once the alter has committed.
func TestDedupePerTopicSweepAlterInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.alt", "dedupe_window => '1 hour'")
	_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, "dp.alt")+` SELECT 'k' || g, g, now() - interval '2 hours'
		FROM generate_series(1, 100) g`)
	require.NoError(t, err)
	alterer := b.Conn(t)
	tx, err := alterer.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT fanout.alter_topic('dp.alt', max_attempts => 7)`)
	require.NoError(t, err)
	sweep := func(now string) int64 {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		var n int64
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT fanout._cleanup_bookkeeping(`+now+`)`).Scan(&n), "a sweep call waited")
		return n
	}
	for i := 0; sweep("now()") > 0; i++ {
		require.Less(t, i, 100)
	}
	require.Equal(t, int64(100), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.alt")), "not swept while altered")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL`),
		"the pass went past the topic")
	require.NoError(t, tx.Commit(b.ctx))
	for i := 0; sweep("now() + interval '1 hour'") > 0; i++ { // the next pass
		require.Less(t, i, 100)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.alt")),
		"the next pass ended with the topic's expired keys still there")
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.dedupe_sweep WHERE next_block IS NOT NULL`))
}

// A publisher marking the topic prioritized (FOR NO KEY UPDATE of its row)
// does not make the sweep skip the topic.
func TestDedupePerTopicSweepWithPrioritizedMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.pm", "dedupe_window => '1 hour'")
	_, err := b.Pool.Exec(b.ctx, `INSERT INTO `+b.dedupeTable(t, "dp.pm")+` SELECT 'k' || g, g, now() - interval '2 hours'
		FROM generate_series(1, 100) g`)
	require.NoError(t, err)
	pubc := b.Conn(t)
	tx, err := pubc.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT fanout.publish('dp.pm', '{}', dedupe_key => 'new', priority => 4)`)
	require.NoError(t, err)
	for i := 0; ; i++ {
		require.Less(t, i, 100)
		if b.count(t, `SELECT fanout._cleanup_bookkeeping()`) == 0 {
			break
		}
	}
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "dp.pm")))
	b.dpConsistent(t)
}

// check_consistency reports a topic whose table of keys is missing, and a
// stray m<id>_dedupe of no topic.
func TestDedupePerTopicConsistency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "dp.cc")
	b.dpConsistent(t)
	tbl := b.dedupeTable(t, "dp.cc")
	_, err := b.Pool.Exec(b.ctx, `ALTER TABLE `+tbl+` RENAME TO m999999_dedupe`)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout.check_consistency()
		WHERE problem LIKE '%dedupe keys%does not exist%' OR problem LIKE '%m999999_dedupe%not catalogued%'`))
}
