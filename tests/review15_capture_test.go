package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A tenant's bytes quota (fanout.set_quota ... max_bytes) bounds what its
// topics retain. A statement-shaped capture's claim-check keeps the
// statement's rows in fanout.capture_chunk, beside the topic's message
// table, for as long as the message is stored: those bytes are retained for
// the topic as much as a message's payload is. Before the fix
// fanout._measure_usage measured the message segments, dedupe keys and
// completion tables only, so a tenant could retain any amount through
// claim-checks (one small message per statement) and never reach its quota.
func TestReview15CaptureClaimCheckCountsInBytesQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prodName, _ := b.tRole(t, "prod_q", "fanout_producer")
	b.tGrant(t, b.Pool, "a.%", prodName, "publish")
	b.createTopic(t, b.Pool, "a.cap", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('a.cap', 'g')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `CREATE TABLE review15_bulk (id int PRIMARY KEY, body text NOT NULL)`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.capture_table('review15_bulk', 'a.cap', shape => 'statement', claim_check_rows => 0)`)
	require.NoError(t, err)

	// 20,000 rows of 400 characters (incompressible md5 text): about 8 MB
	// of claim-check, one message of about 150 bytes.
	_, err = b.Pool.Exec(b.ctx, `INSERT INTO review15_bulk
		SELECT g, (SELECT string_agg(md5(g::text || ':' || i), '') FROM generate_series(1, 12) i)
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	chunkBytes := b.count(t, `SELECT coalesce(sum(pg_column_size(k.rows)), 0) FROM fanout.capture_chunk k
		JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'a.cap'`)
	require.Greater(t, chunkBytes, int64(4<<20), "the claim-check holds the rows")

	// A quota of 4 MB: the topic retains more than that (its claim-check).
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'publish', max_bytes => 4 * 1024 * 1024)`, prodName)
	require.NoError(t, err)
	b.count(t, `SELECT fanout._measure_usage()`)
	used := b.count(t, `SELECT u.bytes FROM fanout.topic_usage u JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'a.cap'`)
	require.GreaterOrEqual(t, used, chunkBytes, "the topic's measured bytes include its claim-check rows")
	_, err = b.Pool.Exec(b.ctx, `INSERT INTO review15_bulk VALUES (0, 'one more')`)
	requireSQLState(t, err, "PGQ25")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.publish('a.cap', '{}')`)
	requireSQLState(t, err, "PGQ25")
}
