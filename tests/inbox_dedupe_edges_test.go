package tests

// Edge cases of idempotent publish (dedupe keys): fanout.publish,
// fanout.publish_batch, fanout._publish_one and m<id>_insert_keyed.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// rvBatch runs a query returning one bigint column (publish_batch ids).
func rvBatch(ctx context.Context, q querier, sql string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// rvKeyed publishes len(keys) payloads {"i":n} with those dedupe keys.
func rvKeyed(ctx context.Context, q querier, topic string, keys []*string) ([]int64, error) {
	return rvBatch(ctx, q, `SELECT fanout.publish_batch($1,
		ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, cardinality($2::text[])) g ORDER BY g),
		dedupe_keys => $2::text[])`, topic, keys)
}

func rvKeys(ks ...string) []*string {
	out := make([]*string, len(ks))
	for i := range ks {
		if ks[i] != "<nil>" {
			out[i] = ptr(ks[i])
		}
	}
	return out
}

func (b *bundle) rvDedupeCount(t *testing.T, topic string) int64 {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, topic))
}

func (b *bundle) rvPub(t *testing.T, q querier, topic, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(b.ctx, `SELECT fanout.publish($1, '{"s":1}', dedupe_key => $2)`, topic, key).Scan(&id))
	return id
}

// 1. Arrays of different lengths, NULL arrays, all-NULL keys.
func TestDedupeEdgeArrayShapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.shape")
	b.createTopic(t, b.Pool, "rv.shape.seq", "sequence_ordering => true")
	bad := []string{
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => ARRAY['a'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => ARRAY['a','b','c'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => '{}'::text[])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], headers => ARRAY['{}']::jsonb[], dedupe_keys => ARRAY['a','b'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], headers => ARRAY['{}','{}','{}']::jsonb[], dedupe_keys => ARRAY['a','b'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['g'], dedupe_keys => ARRAY['a','b'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['g','g','g'], dedupe_keys => ARRAY['a','b'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => ARRAY['a','b'], sequences => ARRAY[1]::bigint[])`,
		`SELECT fanout.publish_batch('rv.shape', NULL::jsonb[], dedupe_keys => ARRAY['a'])`,
		`SELECT fanout.publish_batch('rv.shape', '{}'::jsonb[], dedupe_keys => ARRAY['a'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}', NULL]::jsonb[], dedupe_keys => ARRAY['a','b'])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => ARRAY['a',''])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => ARRAY['a',repeat('x',513)])`,
		`SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], priority => 3, dedupe_keys => ARRAY['a',''])`,
		`SELECT fanout.publish_batch('rv.shape.seq', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['g','g'], sequences => ARRAY[1,2]::bigint[], dedupe_keys => ARRAY['a',''])`,
		`SELECT fanout.publish_batch('rv.shape.seq', ARRAY['{}','{}']::jsonb[], message_groups => ARRAY['g','g'], sequences => ARRAY[1,2]::bigint[], dedupe_keys => ARRAY['a'])`,
		`SELECT fanout.publish('rv.shape', '{}', dedupe_key => '')`,
		`SELECT fanout.publish('rv.shape', '{}', dedupe_key => repeat('é', 513))`,
	}
	for _, q := range bad {
		_, err := rvBatch(b.ctx, b.Pool, q)
		requireSQLState(t, err, "PGQ03")
	}
	require.Zero(t, b.qMessageCount(t, "rv.shape"), "nothing written by a refused batch")
	require.Zero(t, b.qMessageCount(t, "rv.shape.seq"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.allDedupe(t)+` d`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM fanout.seq_published`))
	require.False(t, b.count(t, `SELECT prioritized::int FROM fanout.topic WHERE topic = 'rv.shape'`) == 1,
		"a refused batch with a priority must not mark the topic prioritized")

	// Exactly 512 characters (multi-byte) is fine.
	id := b.rvPub(t, b.Pool, "rv.shape", strings.Repeat("é", 512))
	require.Equal(t, id, b.rvPub(t, b.Pool, "rv.shape", strings.Repeat("é", 512)))

	// NULL dedupe_keys array: no keys, plain publish.
	got, err := rvKeyed(b.ctx, b.Pool, "rv.shape", nil)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.shape', ARRAY['{}','{}']::jsonb[], dedupe_keys => NULL)`)
	require.NoError(t, err)
	require.Len(t, got, 2)
	// All-NULL keys: every element is inserted, twice over.
	n0 := b.qMessageCount(t, "rv.shape")
	a, err := rvKeyed(b.ctx, b.Pool, "rv.shape", rvKeys("<nil>", "<nil>", "<nil>"))
	require.NoError(t, err)
	a2, err := rvKeyed(b.ctx, b.Pool, "rv.shape", rvKeys("<nil>", "<nil>", "<nil>"))
	require.NoError(t, err)
	require.Len(t, a, 3)
	require.Len(t, a2, 3)
	qRequireUnique(t, append(append([]int64{}, a...), a2...), "all-NULL keys")
	require.Equal(t, n0+6, b.qMessageCount(t, "rv.shape"))
	// Empty payloads and empty keys: nothing, no error.
	got, err = rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.shape', '{}'::jsonb[], dedupe_keys => '{}'::text[])`)
	require.NoError(t, err)
	require.Empty(t, got)
	// Mixed NULL and keyed with a repeat: NULLs all distinct, repeat same.
	m, err := rvKeyed(b.ctx, b.Pool, "rv.shape", rvKeys("<nil>", "k", "<nil>", "k"))
	require.NoError(t, err)
	require.Equal(t, m[1], m[3])
	qRequireUnique(t, []int64{m[0], m[1], m[2]}, "mixed NULL")
	require.Equal(t, n0+9, b.qMessageCount(t, "rv.shape"))
}

// 1b. Arrays with a non-1 lower bound / 2-D: must be refused or handled
// consistently (same element pairing) — never silently mis-pair.
func TestDedupeEdgeArrayBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.bounds")
	got, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.bounds', '[0:1]={"{\"p\":0}","{\"p\":1}"}'::jsonb[],
		dedupe_keys => '[5:6]={k0,k1}'::text[])`)
	require.NoError(t, err)
	require.Len(t, got, 2)
	tbl := pgx.Identifier{b.table(t, "rv.bounds")}.Sanitize()
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` m JOIN `+b.dedupeTable(t, "rv.bounds")+` d ON d.message_id = m.id
		WHERE m.id = $1 AND m.payload = '{"p":0}' AND d.dedupe_key = 'k0'`, got[0]), "element 0: payload p0 with key k0")
	// 2-D keys of the right cardinality: pairing follows the flattening.
	got, err = rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.bounds', ARRAY['{}','{}','{}','{}']::jsonb[],
		dedupe_keys => ARRAY[ARRAY['x','y'],ARRAY['x','z']])`)
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, got[0], got[2], "flattened 2-D keys x,y,x,z")
}

// 2. Batch of 1 and of 10,000.
func TestDedupeEdgeBatchSizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.size")
	one, err := rvKeyed(b.ctx, b.Pool, "rv.size", rvKeys("solo"))
	require.NoError(t, err)
	again, err := rvKeyed(b.ctx, b.Pool, "rv.size", rvKeys("solo"))
	require.NoError(t, err)
	require.Equal(t, one, again)
	require.Equal(t, one[0], b.rvPub(t, b.Pool, "rv.size", "solo"))
	require.Equal(t, int64(1), b.qMessageCount(t, "rv.size"))

	const n = 10000
	keys := make([]*string, n)
	for i := range keys {
		keys[i] = ptr(fmt.Sprintf("k%05d", (n-1-i)/2)) // each key twice, descending
	}
	big, err := rvKeyed(b.ctx, b.Pool, "rv.size", keys)
	require.NoError(t, err)
	require.Len(t, big, n)
	for i := 0; i < n; i += 2 {
		require.Equal(t, big[i], big[i+1], "pair %d", i)
	}
	require.Equal(t, int64(1+n/2), b.qMessageCount(t, "rv.size"))
	// Payload i went with key i: message big[i] has payload i+1 (first of its pair).
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM unnest($1::bigint[]) WITH ORDINALITY u(id, ord)
		WHERE u.ord % 2 = 1 AND NOT EXISTS (SELECT 1 FROM `+b.dedupeTable(t, "rv.size")+` d WHERE d.message_id = u.id)`, big))
	again2, err := rvKeyed(b.ctx, b.Pool, "rv.size", keys)
	require.NoError(t, err)
	require.Equal(t, big, again2)
	require.Equal(t, int64(1+n/2), b.qMessageCount(t, "rv.size"))

	// 10,000 elements of one key.
	same := make([]*string, n)
	for i := range same {
		same[i] = ptr("one-key")
	}
	s, err := rvKeyed(b.ctx, b.Pool, "rv.size", same)
	require.NoError(t, err)
	require.Len(t, s, n)
	for i := range s {
		require.Equal(t, s[0], s[i])
	}
	require.Equal(t, int64(2+n/2), b.qMessageCount(t, "rv.size"))
	// Payload of the message is the first element's.
	var p int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout_data.`+
		pgx.Identifier{b.table(t, "rv.size")}.Sanitize()+` WHERE id = $1 AND payload = '{"i":1}'`, s[0]).Scan(&p))
	require.Equal(t, int64(1), p, "the first element's payload is stored")
}

func (b *bundle) table(t *testing.T, topic string) string {
	t.Helper()
	var table string
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT data_table FROM fanout.topic WHERE topic = $1", topic).Scan(&table))
	return table
}

// 3. One batch mixing a 3x repeat, a key published earlier, a key held by an
// open transaction (commit and rollback), NULLs and a new key.
func TestDedupeEdgeMixedHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.mix")
	old := b.rvPub(t, b.Pool, "rv.mix", "old")
	for _, holderBatch := range []bool{false, true} {
		for _, commit := range []bool{true, false} {
			sfx := fmt.Sprintf("-%v-%v", holderBatch, commit)
			holder, batcher := b.Conn(t), b.Conn(t)
			tx, err := holder.Begin(b.ctx)
			require.NoError(t, err)
			var held int64
			if holderBatch {
				hs, err := rvKeyed(b.ctx, tx, "rv.mix", rvKeys("held"+sfx, "held2"+sfx))
				require.NoError(t, err)
				held = hs[0]
			} else {
				held = b.rvPub(t, tx, "rv.mix", "held"+sfx)
			}
			before := b.qMessageCount(t, "rv.mix")
			type res struct {
				ids []int64
				err error
			}
			done := make(chan res, 1)
			keys := rvKeys("rep"+sfx, "held"+sfx, "rep"+sfx, "<nil>", "old", "rep"+sfx, "held"+sfx, "new"+sfx)
			go func() {
				btx, err := batcher.Begin(b.ctx)
				if err != nil {
					done <- res{nil, err}
					return
				}
				got, err := rvKeyed(b.ctx, btx, "rv.mix", keys)
				if err != nil {
					_ = btx.Rollback(b.ctx)
					done <- res{nil, err}
					return
				}
				done <- res{got, btx.Commit(b.ctx)}
			}()
			b.tWaitBlocked(t, batcher)
			if commit {
				require.NoError(t, tx.Commit(b.ctx))
			} else {
				require.NoError(t, tx.Rollback(b.ctx))
			}
			r := <-done
			require.NoError(t, r.err, sfx)
			got := r.ids
			require.Len(t, got, 8)
			require.Equal(t, got[0], got[2], sfx)
			require.Equal(t, got[0], got[5], sfx)
			require.Equal(t, got[1], got[6], sfx)
			require.Equal(t, old, got[4], sfx)
			qRequireUnique(t, []int64{got[0], got[1], got[3], got[4], got[7]}, "distinct keys"+sfx)
			if commit {
				require.Equal(t, held, got[1], sfx)
			} else {
				require.NotEqual(t, held, got[1], sfx)
			}
			// The batch adds rep, NULL and new, and held when the holder
			// rolled back; a committed holder adds its own 1 (or 2).
			want := before + 3 + 1
			if commit && holderBatch {
				want = before + 3 + 2
			}
			require.Equal(t, want, b.qMessageCount(t, "rv.mix"), sfx)
			// the dedupe row points at a message that exists
			require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rv.mix")+` d WHERE d.dedupe_key LIKE '%'||$1
				AND NOT EXISTS (SELECT 1 FROM fanout_data.`+pgx.Identifier{b.table(t, "rv.mix")}.Sanitize()+` m WHERE m.id = d.message_id)`, sfx), sfx)
		}
	}
}

// 4. More than 8 colliding batches in one transaction, then rollback.
func TestDedupeEdgeSubxactBudgetRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.budget")
	base := b.rvPub(t, b.Pool, "rv.budget", "base")
	conn := b.Conn(t)
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	var ids [][]int64
	for i := 0; i < 12; i++ {
		got, err := rvKeyed(b.ctx, tx, "rv.budget", rvKeys(fmt.Sprintf("t%d", i), "base", fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i)))
		require.NoError(t, err, "batch %d", i)
		require.Equal(t, base, got[1])
		require.Equal(t, got[0], got[2])
		ids = append(ids, got)
	}
	// no-collision batches after the budget is used
	for i := 0; i < 3; i++ {
		got, err := rvKeyed(b.ctx, tx, "rv.budget", rvKeys(fmt.Sprintf("v%d", i)))
		require.NoError(t, err)
		ids = append(ids, got)
	}
	var used string
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT current_setting('fanout.dedupe_subxacts', true)`).Scan(&used))
	require.Equal(t, "8", used)
	// Repeat inside the same tx: same ids.
	got, err := rvKeyed(b.ctx, tx, "rv.budget", rvKeys("t0", "u11", "v2"))
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0][0], ids[11][3], ids[14][0]}, got)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, int64(1), b.qMessageCount(t, "rv.budget"), "everything rolled back")
	require.Equal(t, int64(1), b.rvDedupeCount(t, "rv.budget"))
	// keys free again
	again, err := rvKeyed(b.ctx, b.Pool, "rv.budget", rvKeys("t0", "u11", "v2", "t0"))
	require.NoError(t, err)
	require.NotEqual(t, ids[0][0], again[0])
	require.Equal(t, again[0], again[3])
	require.Equal(t, int64(4), b.qMessageCount(t, "rv.budget"))
	// Budget is per transaction: a new transaction starts at 0.
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT coalesce(current_setting('fanout.dedupe_subxacts', true), '')`).Scan(&used))
	require.NotEqual(t, "8", used)
}

// 5. Caller's savepoints around publish_batch.
func TestDedupeEdgeSavepoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.sp")
	conn := b.Conn(t)
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "SAVEPOINT s1")
	require.NoError(t, err)
	first, err := rvKeyed(b.ctx, tx, "rv.sp", rvKeys("a", "b", "a"))
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, "ROLLBACK TO SAVEPOINT s1")
	require.NoError(t, err)
	second, err := rvKeyed(b.ctx, tx, "rv.sp", rvKeys("a", "b", "b"))
	require.NoError(t, err)
	require.NotEqual(t, first[0], second[0], "key freed by ROLLBACK TO SAVEPOINT")
	require.NotEqual(t, first[1], second[1])
	// savepoint around a colliding batch (fallback path)
	_, err = tx.Exec(b.ctx, "SAVEPOINT s2")
	require.NoError(t, err)
	third, err := rvKeyed(b.ctx, tx, "rv.sp", rvKeys("a", "c", "c"))
	require.NoError(t, err)
	require.Equal(t, second[0], third[0])
	_, err = tx.Exec(b.ctx, "ROLLBACK TO SAVEPOINT s2")
	require.NoError(t, err)
	// a failing batch inside a savepoint leaves earlier keys alone
	_, err = tx.Exec(b.ctx, "SAVEPOINT s3")
	require.NoError(t, err)
	_, err = rvKeyed(b.ctx, tx, "rv.sp", rvKeys("d", ""))
	requireSQLState(t, err, "PGQ03")
	_, err = tx.Exec(b.ctx, "ROLLBACK TO SAVEPOINT s3")
	require.NoError(t, err)
	fourth, err := rvKeyed(b.ctx, tx, "rv.sp", rvKeys("c", "a", "d"))
	require.NoError(t, err)
	require.NotEqual(t, third[1], fourth[0])
	require.Equal(t, second[0], fourth[1])
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(4), b.qMessageCount(t, "rv.sp"), "a, b, c, d once each")
	require.Equal(t, int64(4), b.rvDedupeCount(t, "rv.sp"))
	// Many savepoint-rolled-back batches in one transaction (subxact counter reverted).
	tx, err = conn.Begin(b.ctx)
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		_, err = tx.Exec(b.ctx, "SAVEPOINT x")
		require.NoError(t, err)
		_, err := rvKeyed(b.ctx, tx, "rv.sp", rvKeys("a", fmt.Sprintf("n%d", i), "a"))
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "ROLLBACK TO SAVEPOINT x")
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(4), b.qMessageCount(t, "rv.sp"))
}

// 6. REPEATABLE READ / SERIALIZABLE callers publishing a key committed after
// their snapshot: the original id or a serialization failure, never a NULL
// id or a second message.
func TestDedupeEdgeIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.iso")
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, mode := range []string{"single", "batch", "batch-repeat", "batch-exhausted"} {
			name := fmt.Sprintf("%s-%s", iso, mode)
			key := "k-" + name
			c := b.Conn(t)
			tx, err := c.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			if mode == "batch-exhausted" {
				for i := 0; i < 8; i++ {
					_, err := rvKeyed(b.ctx, tx, "rv.iso", rvKeys(fmt.Sprintf("pre-%s-%d", name, i)))
					require.NoError(t, err)
				}
			}
			var x int
			require.NoError(t, tx.QueryRow(b.ctx, "SELECT 1").Scan(&x)) // take the snapshot
			before := b.qMessageCount(t, "rv.iso")
			orig := b.rvPub(t, b.Pool, "rv.iso", key)
			var got []int64
			switch mode {
			case "single":
				var id int64
				err = tx.QueryRow(b.ctx, `SELECT fanout.publish('rv.iso', '{}', dedupe_key => $1)`, key).Scan(&id)
				got = []int64{id}
			case "batch":
				got, err = rvKeyed(b.ctx, tx, "rv.iso", rvKeys(key, "other-"+name))
			default:
				got, err = rvKeyed(b.ctx, tx, "rv.iso", rvKeys(key, key, "other-"+name))
			}
			if err != nil {
				requireSQLState(t, err, "40001")
				_ = tx.Rollback(b.ctx)
			} else {
				require.Equal(t, orig, got[0], name)
				require.NoError(t, tx.Commit(b.ctx), name)
			}
			require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rv.iso")+` d WHERE d.dedupe_key = $1 AND d.message_id <> $2`, key, orig), name)
			after := b.qMessageCount(t, "rv.iso")
			if err != nil {
				require.Equal(t, before+1, after, name)
			}
		}
	}
}

// 7. Window expiry with repeats in a batch, both paths.
func TestDedupeEdgeWindowBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.win", "dedupe_window => '50 milliseconds'")
	first, err := rvKeyed(b.ctx, b.Pool, "rv.win", rvKeys("w", "x", "w"))
	require.NoError(t, err)
	require.Equal(t, first[0], first[2])
	time.Sleep(120 * time.Millisecond)
	second, err := rvKeyed(b.ctx, b.Pool, "rv.win", rvKeys("w", "w", "y", "w", "x"))
	require.NoError(t, err)
	require.NotEqual(t, first[0], second[0], "expired key published again")
	require.Equal(t, second[0], second[1])
	require.Equal(t, second[0], second[3])
	require.NotEqual(t, first[1], second[4])
	require.Equal(t, int64(2+3), b.qMessageCount(t, "rv.win"))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rv.win")+` WHERE dedupe_key = 'w' AND message_id = $1`, second[0]))
	// zero window: every publish is new, but repeats within one batch still one id
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('rv.win', dedupe_window => '0 seconds')`)
	require.NoError(t, err)
	z, err := rvKeyed(b.ctx, b.Pool, "rv.win", rvKeys("z", "z", "z"))
	require.NoError(t, err)
	require.Equal(t, z[0], z[1])
	require.Equal(t, z[0], z[2])
	// single publish after expiry inside a transaction that already used the key
	tx, err := b.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.alter_topic('rv.win', dedupe_window => '50 milliseconds')`)
	require.NoError(t, err)
	b.rvPub(t, tx, "rv.win", "tx-key")
	time.Sleep(120 * time.Millisecond)
	p2, err := rvKeyed(b.ctx, tx, "rv.win", rvKeys("tx-key", "tx-key"))
	require.NoError(t, err)
	require.Equal(t, p2[0], p2[1])
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rv.win")+` WHERE dedupe_key = 'tx-key'`))
}

// 8. Odd key strings: compared byte-wise, same in both paths.
func TestDedupeEdgeKeyStrings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.str")
	keys := []string{
		`it's`, `"q"`, `a;DROP TABLE fanout.topic;--`, `$$x$$`, `back\slash`, "caf\u00e9", "cafe\u0301",
		"k", "k ", " k", "K", "k\t", "k\n", "\u00a0", "日本語", "🙂", "a,b", "{a}", "NULL", "null", `%`, `_`,
	}
	single := map[string]int64{}
	for _, k := range keys {
		single[k] = b.rvPub(t, b.Pool, "rv.str", k)
	}
	all := make([]int64, 0, len(keys))
	for _, k := range keys {
		all = append(all, single[k])
	}
	qRequireUnique(t, all, "each distinct string its own key (byte-wise)")
	ks := make([]*string, 0, 2*len(keys))
	for _, k := range keys {
		ks = append(ks, ptr(k))
	}
	for i := len(keys) - 1; i >= 0; i-- {
		ks = append(ks, ptr(keys[i]))
	}
	got, err := rvKeyed(b.ctx, b.Pool, "rv.str", ks)
	require.NoError(t, err)
	for i, k := range keys {
		require.Equal(t, single[k], got[i], "key %q", k)
		require.Equal(t, single[k], got[2*len(keys)-1-i], "key %q", k)
	}
	require.Equal(t, int64(len(keys)), b.qMessageCount(t, "rv.str"))
	// new keys first via batch, then single
	got2, err := rvKeyed(b.ctx, b.Pool, "rv.str", rvKeys("caf\u00e9!", "cafe\u0301!", "caf\u00e9!"))
	require.NoError(t, err)
	require.Equal(t, got2[0], got2[2])
	require.NotEqual(t, got2[0], got2[1])
	require.Equal(t, got2[0], b.rvPub(t, b.Pool, "rv.str", "caf\u00e9!"))
	require.Equal(t, got2[1], b.rvPub(t, b.Pool, "rv.str", "cafe\u0301!"))
}

// 9. Partitioned and sequence-ordered topics with dedupe in a batch.
func TestDedupeEdgePartitionedSequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.part", "partitions => 4")
	got, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.part', ARRAY['{}','{}','{}','{}']::jsonb[],
		message_groups => ARRAY['g1','g2','g1','g3'], dedupe_keys => ARRAY['a','b','a',NULL])`)
	require.NoError(t, err)
	require.Equal(t, got[0], got[2])
	require.Equal(t, int64(3), b.qMessageCount(t, "rv.part"))
	again, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.part', ARRAY['{}','{}']::jsonb[],
		message_groups => ARRAY['zz','g2'], dedupe_keys => ARRAY['a','b'])`)
	require.NoError(t, err)
	require.Equal(t, []int64{got[0], got[1]}, again)
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM fanout_data.`+pgx.Identifier{b.table(t, "rv.part")}.Sanitize()+` WHERE kpart IS NULL`))
	require.Equal(t, int64(3), b.qMessageCount(t, "rv.part"))
	// the ids are the messages read
	// The ids are the messages read (a read returns one key partition's
	// page: read and ack until nothing is left).
	var read []int64
	for i := 0; i < 10; i++ {
		ms := b.read(t, b.Pool, "rv.part", nil, "c1", 100, "30 seconds")
		if len(ms) == 0 {
			break
		}
		read = append(read, ids(ms)...)
		_, err = b.Pool.Exec(b.ctx, `SELECT fanout.ack($1)`, ms[0].LeaseID)
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []int64{got[0], got[1], got[3]}, read)

	b.createTopic(t, b.Pool, "rv.seq", "sequence_ordering => true")
	s1, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.seq', ARRAY['{}','{}','{}','{}']::jsonb[],
		message_groups => ARRAY['g','g','g','h'], sequences => ARRAY[1,2,3,1]::bigint[], dedupe_keys => ARRAY['a','b','a',NULL])`)
	require.NoError(t, err)
	require.Equal(t, s1[0], s1[2], "key repeated in a sequence batch")
	require.Equal(t, int64(3), b.qMessageCount(t, "rv.seq"))
	s2, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.seq', ARRAY['{}','{}']::jsonb[],
		message_groups => ARRAY['g','g'], sequences => ARRAY[9,2]::bigint[], dedupe_keys => ARRAY['b','zz'])`)
	require.NoError(t, err)
	require.Equal(t, s1[1], s2[0])
	require.Equal(t, s1[1], s2[1], "sequence 2 of g published before")
	require.Equal(t, int64(3), b.qMessageCount(t, "rv.seq"))
}

// 9b. Two sequence-ordered batches sharing keys in opposite order, released
// together by a third holder's rollback: the keyed path sorts its keys to
// avoid a deadlock; the sequence path should not deadlock either.
func TestDedupeEdgeSequenceBatchDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.seqdl", "sequence_ordering => true")
	b.rvOppositeOrder(t, "rv.seqdl", true)
}

// Same scenario on a plain topic (keyed path: keys sorted).
func TestDedupeEdgeKeyedBatchNoDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.seqdl")
	b.rvOppositeOrder(t, "rv.seqdl", false)
}

func (b *bundle) rvOppositeOrder(t *testing.T, topic string, seq bool) {
	deadlocks := 0
	for round := 0; round < 5; round++ {
		k1, k2 := fmt.Sprintf("r%d-k1", round), fmt.Sprintf("r%d-k2", round)
		holder, ca, cb := b.Conn(t), b.Conn(t), b.Conn(t)
		htx, err := holder.Begin(b.ctx)
		require.NoError(t, err)
		var hid int64
		if seq {
			require.NoError(t, htx.QueryRow(b.ctx, `SELECT fanout.publish('rv.seqdl', '{}', message_group => $1, sequence => 1, dedupe_key => $2)`,
				fmt.Sprintf("h%d", round), k2).Scan(&hid))
		} else {
			hid = b.rvPub(t, htx, "rv.seqdl", k2)
		}
		run := func(c *pgx.Conn, keys []string, grp string) chan error {
			out := make(chan error, 1)
			go func() {
				tx, err := c.Begin(b.ctx)
				if err != nil {
					out <- err
					return
				}
				q := `SELECT fanout.publish_batch('rv.seqdl', ARRAY['{}','{}']::jsonb[],
					message_groups => ARRAY[$2::text, $2::text], sequences => ARRAY[1,2]::bigint[], dedupe_keys => $1::text[])`
				if !seq {
					q = `SELECT fanout.publish_batch('rv.seqdl', ARRAY['{}','{}']::jsonb[],
					message_groups => ARRAY[$2::text, $2::text], dedupe_keys => $1::text[])`
				}
				_, err = rvBatch(b.ctx, tx, q, keys, grp)
				if err != nil {
					_ = tx.Rollback(b.ctx)
					out <- err
					return
				}
				out <- tx.Commit(b.ctx)
			}()
			return out
		}
		eb := run(cb, []string{k2, k1}, fmt.Sprintf("b%d", round)) // waits on k2
		b.tWaitBlocked(t, cb)
		ea := run(ca, []string{k1, k2}, fmt.Sprintf("a%d", round)) // takes k1, waits on k2
		b.tWaitBlocked(t, ca)
		require.NoError(t, htx.Rollback(b.ctx))
		errA, errB := <-ea, <-eb
		for _, e := range []error{errA, errB} {
			if e != nil {
				requireSQLState(t, e, "40P01")
				deadlocks++
			}
		}
	}
	require.Zero(t, deadlocks, "concurrent publishers of the same keys deadlocked (40P01)")
}

// 10. priority / deliver_at with dedupe in a batch.
func TestDedupeEdgePriorityDeliverAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.prio")
	got, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.prio', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[],
		dedupe_keys => ARRAY['p','p',NULL], priority => 7, deliver_at => clock_timestamp() + interval '1 hour')`)
	require.NoError(t, err)
	require.Equal(t, got[0], got[1])
	tbl := pgx.Identifier{b.table(t, "rv.prio")}.Sanitize()
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` WHERE priority = 7 AND deliver_at > now()`))
	again, err := rvBatch(b.ctx, b.Pool, `SELECT fanout.publish_batch('rv.prio', ARRAY['{"n":4}','{"n":5}']::jsonb[],
		dedupe_keys => ARRAY['p','q'], priority => 0)`)
	require.NoError(t, err)
	require.Equal(t, got[0], again[0])
	require.Equal(t, int64(3), b.qMessageCount(t, "rv.prio"))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM fanout_data.`+tbl+` WHERE priority IS NULL AND deliver_at IS NULL`))
	require.Equal(t, int64(1), b.count(t, `SELECT prioritized::int FROM fanout.topic WHERE topic = 'rv.prio'`))
	// single with priority then batch repeat
	var sp int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout.publish('rv.prio', '{}', dedupe_key => 'sp', priority => 9, delay => '1 hour')`).Scan(&sp))
	r, err := rvKeyed(b.ctx, b.Pool, "rv.prio", rvKeys("sp", "sp"))
	require.NoError(t, err)
	require.Equal(t, []int64{sp, sp}, r)
	require.Equal(t, int64(4), b.qMessageCount(t, "rv.prio"))
}

// 11. drop_topic while a key is held by an open transaction.
func TestDedupeEdgeDropWhileHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.drop")
	keys := b.dedupeTable(t, "rv.drop")
	holder, dropper, waiter := b.Conn(t), b.Conn(t), b.Conn(t)
	tx, err := holder.Begin(b.ctx)
	require.NoError(t, err)
	held := b.rvPub(t, tx, "rv.drop", "hk")
	// another publisher of the same key, waiting on the holder
	wdone := make(chan error, 1)
	var wid []int64
	go func() {
		var e error
		wid, e = rvKeyed(b.ctx, waiter, "rv.drop", rvKeys("hk", "other"))
		wdone <- e
	}()
	b.tWaitBlocked(t, waiter)
	ddone := make(chan error, 1)
	go func() {
		_, e := dropper.Exec(b.ctx, `SELECT fanout.drop_topic('rv.drop', force => true)`)
		ddone <- e
	}()
	b.tWaitBlocked(t, dropper)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-wdone)
	require.Equal(t, held, wid[0])
	require.NoError(t, <-ddone)
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, keys), "the topic's keys went with it")
	// publish after the drop: PGQ01; recreated topic: key free
	_, err = rvKeyed(b.ctx, b.Pool, "rv.drop", rvKeys("hk"))
	requireSQLState(t, err, "PGQ01")
	b.createTopic(t, b.Pool, "rv.drop")
	n, err := rvKeyed(b.ctx, b.Pool, "rv.drop", rvKeys("hk", "hk"))
	require.NoError(t, err)
	require.Equal(t, n[0], n[1])
	require.Equal(t, int64(1), b.qMessageCount(t, "rv.drop"))

	// holder still open when the drop is requested; holder rolls back
	keys = b.dedupeTable(t, "rv.drop")
	tx, err = holder.Begin(b.ctx)
	require.NoError(t, err)
	_ = b.rvPub(t, tx, "rv.drop", "hk2")
	go func() {
		_, e := dropper.Exec(b.ctx, `SELECT fanout.drop_topic('rv.drop', force => true)`)
		ddone <- e
	}()
	b.tWaitBlocked(t, dropper)
	require.NoError(t, tx.Rollback(b.ctx))
	require.NoError(t, <-ddone)
	require.Zero(t, b.count(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, keys))
	require.Zero(t, b.count(t, `SELECT count(*) FROM `+b.allDedupe(t)+` d`))
}

// 12. Same keys, many concurrent batch publishers in opposite orders (no
// deadlock, one message per key, everyone the same ids).
func TestDedupeEdgeConcurrentBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.conc")
	const workers = 8
	keys := []string{"a", "b", "c", "d", "e", "f"}
	res := make([]map[string]int64, workers)
	errs := make(chan error, workers)
	start := make(chan struct{})
	for w := 0; w < workers; w++ {
		c := b.Conn(t)
		go func(w int) {
			ks := make([]string, 0, 12)
			for i := range keys {
				if w%2 == 0 {
					ks = append(ks, keys[i])
				} else {
					ks = append(ks, keys[len(keys)-1-i])
				}
			}
			ks = append(ks, ks...)
			<-start
			tx, err := c.Begin(b.ctx)
			if err != nil {
				errs <- err
				return
			}
			// exhaust the budget on odd workers to exercise the fallback directly
			if w%4 == 1 {
				if _, err := tx.Exec(b.ctx, `SELECT set_config('fanout.dedupe_subxacts', '8', true)`); err != nil {
					errs <- err
					return
				}
			}
			ptrs := make([]*string, len(ks))
			for i := range ks {
				ptrs[i] = ptr(ks[i])
			}
			got, err := rvKeyed(b.ctx, tx, "rv.conc", ptrs)
			if err != nil {
				_ = tx.Rollback(b.ctx)
				errs <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
			m := map[string]int64{}
			for i, k := range ks {
				if v, ok := m[k]; ok && v != got[i] {
					errs <- fmt.Errorf("worker %d: key %s two ids", w, k)
					return
				}
				m[k] = got[i]
			}
			res[w] = m
			errs <- tx.Commit(b.ctx)
		}(w)
	}
	close(start)
	for w := 0; w < workers; w++ {
		require.NoError(t, <-errs)
	}
	for w := 1; w < workers; w++ {
		require.Equal(t, res[0], res[w], "worker %d", w)
	}
	require.Equal(t, int64(len(keys)), b.qMessageCount(t, "rv.conc"))
}

// 13. Two publishers racing for a key past its window: A takes it over in an
// open transaction, B waits; A commits → B gets A's id; A rolls back → B
// takes it over itself. Also RR/SERIALIZABLE with a key committed before
// the snapshot returns the original id.
func TestDedupeEdgeExpiredTakeoverRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The old row is put past the window by moving its created_at back, so
	// that the new claim is never close to expiring itself (a short window
	// could run out while B waits on a loaded machine).
	b.createTopic(t, b.Pool, "rv.take", "dedupe_window => '1 hour'")
	for _, aBatch := range []bool{false, true} {
		for _, commit := range []bool{true, false} {
			key := fmt.Sprintf("e-%v-%v", aBatch, commit)
			old := b.rvPub(t, b.Pool, "rv.take", key)
			_, err := b.Pool.Exec(b.ctx, `UPDATE `+b.dedupeTable(t, "rv.take")+` SET created_at = created_at - interval '2 hours'
				WHERE dedupe_key = $1`, key)
			require.NoError(t, err)
			ca, cb := b.Conn(t), b.Conn(t)
			tx, err := ca.Begin(b.ctx)
			require.NoError(t, err)
			var aid int64
			if aBatch {
				r, err := rvKeyed(b.ctx, tx, "rv.take", rvKeys(key, key))
				require.NoError(t, err)
				aid = r[0]
			} else {
				aid = b.rvPub(t, tx, "rv.take", key)
			}
			require.NotEqual(t, old, aid)
			done := make(chan []int64, 1)
			go func() {
				r, err := rvKeyed(b.ctx, cb, "rv.take", rvKeys(key, "<nil>", key))
				if err != nil {
					t.Log(err)
				}
				done <- r
			}()
			b.tWaitBlocked(t, cb)
			before := b.qMessageCount(t, "rv.take")
			if commit {
				require.NoError(t, tx.Commit(b.ctx))
			} else {
				require.NoError(t, tx.Rollback(b.ctx))
			}
			r := <-done
			require.Len(t, r, 3)
			require.Equal(t, r[0], r[2])
			if commit {
				require.Equal(t, aid, r[0], key)
				require.Equal(t, before+1+1, b.qMessageCount(t, "rv.take"), key)
			} else {
				require.NotEqual(t, aid, r[0], key)
				require.NotEqual(t, old, r[0], key)
				require.Equal(t, before+2, b.qMessageCount(t, "rv.take"), key)
			}
			require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM `+b.dedupeTable(t, "rv.take")+` WHERE dedupe_key = $1 AND message_id = $2`, key, r[0]))
		}
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		key := "pre-" + string(iso)
		orig := b.rvPub(t, b.Pool, "rv.take", key)
		tx, err := b.Pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		r, err := rvKeyed(b.ctx, tx, "rv.take", rvKeys(key, "n-"+key, key))
		require.NoError(t, err)
		require.Equal(t, []int64{orig, orig}, []int64{r[0], r[2]})
		require.Equal(t, orig, b.rvPub(t, tx, "rv.take", key))
		require.NoError(t, tx.Commit(b.ctx))
	}
}

// Two batches publishing the same sequences of one aggregate in opposite
// orders, released together by a third holder's rollback: the sequence
// claims go in (message_group, sequence) order, so one batch waits for the
// other instead of deadlocking, and both get the same ids (one publishes
// the messages).
func TestDedupeEdgeSequenceClaimsOppositeOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "rv.seqorder", "sequence_ordering => true")
	for round := 0; round < 5; round++ {
		grp := fmt.Sprintf("acct-%d", round)
		holder, ca, cb := b.Conn(t), b.Conn(t), b.Conn(t)
		htx, err := holder.Begin(b.ctx)
		require.NoError(t, err)
		_, err = htx.Exec(b.ctx, `SELECT fanout.publish('rv.seqorder', '{}', message_group => $1, sequence => 2)`, grp)
		require.NoError(t, err)
		type result struct {
			ids []int64
			err error
		}
		run := func(c *pgx.Conn, seqs []int64) chan result {
			out := make(chan result, 1)
			go func() {
				ids, err := rvBatch(b.ctx, c, `SELECT fanout.publish_batch('rv.seqorder', ARRAY['{}','{}']::jsonb[],
					message_groups => ARRAY[$1::text, $1::text], sequences => $2::bigint[])`, grp, seqs)
				out <- result{ids, err}
			}()
			return out
		}
		rb := run(cb, []int64{2, 1}) // waits on sequence 2
		b.tWaitBlocked(t, cb)
		ra := run(ca, []int64{1, 2}) // waits on 1 (held by cb) or on 2
		b.tWaitBlocked(t, ca)
		require.NoError(t, htx.Rollback(b.ctx))
		a, bb := <-ra, <-rb
		require.NoError(t, a.err, "round %d", round)
		require.NoError(t, bb.err, "round %d", round)
		require.Equal(t, []int64{a.ids[0], a.ids[1]}, []int64{bb.ids[1], bb.ids[0]}, "the same message per sequence")
		require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM fanout.seq_published sp
			JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'rv.seqorder' AND sp.message_group = $1`, grp))
	}
	require.Equal(t, int64(10), b.qMessageCount(t, "rv.seqorder"))
}
