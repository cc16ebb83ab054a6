package tests

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// No SQL-language function runs on the consume path. A SQL function pins
// search_path like every fanout function, so it is never inlined, and it is
// parsed and planned again in every transaction that calls it: fanout._epoch
// did that once per page read (the largest single step of a page's server
// time after the page's own queries). Counted with the transaction's
// function statistics over a read, a pipelined read (ack =>) and an ack.
func TestConsumePathRunsNoSQLFunction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "sqlfree")
	for i := 0; i < 5; i++ {
		b.publish(t, b.Pool, "sqlfree", `{}`)
	}
	conn := b.Conn(t)
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, "SET LOCAL track_functions = 'all'")
	require.NoError(t, err)
	var lease int64
	require.NoError(t, tx.QueryRow(b.ctx,
		"SELECT max(lease_id) FROM fanout.read('sqlfree', consumer => 'c', max_messages => 2)").Scan(&lease))
	require.NoError(t, tx.QueryRow(b.ctx,
		"SELECT max(lease_id) FROM fanout.read('sqlfree', consumer => 'c', max_messages => 2, ack => $1)", lease).Scan(&lease))
	var acked int64
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT fanout.ack($1)", lease).Scan(&acked))
	require.EqualValues(t, 2, acked)
	var called, sqlFns []string
	rows, err := tx.Query(b.ctx, `
		SELECT p.oid::regprocedure::text, l.lanname = 'sql'
		FROM pg_stat_xact_user_functions f
		JOIN pg_proc p ON p.oid = f.funcid JOIN pg_language l ON l.oid = p.prolang
		WHERE f.schemaname IN ('fanout', 'fanout_data') AND f.calls > 0
		ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var fn string
		var isSQL bool
		require.NoError(t, rows.Scan(&fn, &isSQL))
		called = append(called, fn)
		if isSQL {
			sqlFns = append(sqlFns, fn)
		}
	}
	require.NoError(t, rows.Err())
	require.Contains(t, called, "fanout._epoch()", "the statistics saw the page's epoch")
	require.Empty(t, sqlFns, "SQL-language functions on the consume path")
}

// leaseRounds is fanout._lease_code's construction written out again from
// its header: six rounds of an unbalanced Feistel network over a 31-bit half
// a and a 32-bit half b, round r XORing the first 32 bits of
// sha256(key || int4send(r) || int8send(the other half)) into a (31 bits)
// or b.
func leaseRounds(key []byte, v uint64, encode bool) uint64 {
	f := func(r byte, x uint64) uint64 {
		in := append(append([]byte{}, key...), make([]byte, 12)...)
		binary.BigEndian.PutUint32(in[len(key):], uint32(r))
		binary.BigEndian.PutUint64(in[len(key)+4:], x)
		h := sha256.Sum256(in)
		return uint64(binary.BigEndian.Uint32(h[:4]))
	}
	a, bb := v>>32, v&0xffffffff
	if encode {
		for r := byte(1); r <= 6; r++ {
			if r%2 == 1 {
				a ^= f(r, bb) & 0x7fffffff
			} else {
				bb ^= f(r, a)
			}
		}
	} else {
		for r := byte(6); r >= 1; r-- {
			if r%2 == 1 {
				a ^= f(r, bb) & 0x7fffffff
			} else {
				bb ^= f(r, a)
			}
		}
	}
	return a<<32 | bb
}

// Lease ids are a keyed permutation of the positive bigints: the SQL
// (fanout._lease_code) computes exactly the construction its header
// describes (checked against an independent implementation for ids at the
// edges and at random), every id round-trips, and the one positive id the
// rounds map to 0, which is no id, is walked on once more (to the rounds'
// image of 0) and decodes back. Before, four rounds on 32-bit halves, walked
// while the result was negative.
func TestLeaseCodeIsTheDocumentedPermutation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var key []byte
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT k FROM fanout.lease_key").Scan(&key))
	require.Len(t, key, 32)
	code := func(id uint64, encode bool) uint64 {
		t.Helper()
		var out *int64
		require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._lease_code($1, $2)", int64(id), encode).Scan(&out))
		require.NotNil(t, out, "id %d", id)
		require.Positive(t, *out, "id %d", id)
		return uint64(*out)
	}
	ids := []uint64{1, 2, 1<<32 - 1, 1 << 32, 1<<32 + 1<<16 + 1, 1<<62 + 7, 1<<63 - 1}
	rng := rand.New(rand.NewSource(29))
	for i := 0; i < 40; i++ {
		ids = append(ids, uint64(rng.Int63n(1<<40))+1, uint64(rng.Int63())|1)
	}
	for _, id := range ids {
		enc := code(id, true)
		require.Equal(t, leaseRounds(key, id, true), enc, "encode %d", id)
		require.Equal(t, id, code(enc, false), "round trip of %d", id)
	}
	// The preimage of 0: encoded, it lands on the image of 0.
	zeroFrom := leaseRounds(key, 0, false)
	require.NotZero(t, zeroFrom)
	require.Equal(t, uint64(0), leaseRounds(key, zeroFrom, true))
	walked := code(zeroFrom, true)
	require.Equal(t, leaseRounds(key, 0, true), walked, "walked past 0 once")
	require.Equal(t, zeroFrom, code(walked, false))
	var none *int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT fanout._lease_code(0, true)").Scan(&none))
	require.Nil(t, none)
}
