package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// rawLease is the internal id of public lease id (slot * 2^32 + epoch *
// 2^16 + page; fanout._lease_code), through the test's superuser connection:
// for tests that check which slot and page a read used.
func rawLease(t *testing.T, b *bundle, id int64) int64 {
	t.Helper()
	var raw *int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._lease_code($1, false)`, id).Scan(&raw))
	require.NotNil(t, raw, "lease id %d decodes to nothing", id)
	return *raw
}

// publicLease is the public id of an internal one (the inverse of rawLease).
func publicLease(t *testing.T, b *bundle, raw int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._lease_code($1, true)`, raw).Scan(&id))
	return id
}

// Lease ids reveal nothing across topics (security review, finding 4).
// Slots came from one sequence for every topic and the public id was
// slot * 2^32 + epoch * 2^16 + page, so tenant a's next new slot jumped by
// the number of slots tenant b opened meanwhile, and a's consecutive pages
// of one slot differed by 1. Now the public id is a keyed permutation of
// that (fanout._lease_code): here tenant b opens 5 slots between two of
// tenant a's, and a's ids show neither the jump nor the page step; the key
// and the permutation are out of a tenant's reach; an internal id of a's
// lease presented as it is (the old form) is unknown (PGQ10), not a
// foreign lease (PGQ21), so it answers no question about a's activity.
func TestLeaseIdsRevealNothingAcrossTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	consA, a := b.tRole(t, "cons_a", "fanout_consumer")
	consB, bc := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", consA, "consume")
	b.tGrant(t, b.Pool, "b.%", consB, "consume")
	b.createTopic(t, b.Pool, "a.q")
	b.createTopic(t, b.Pool, "b.q")
	for i := 0; i < 3; i++ {
		b.publish(t, b.Pool, "a.q", `{}`)
	}
	for i := 0; i < 5; i++ {
		b.publish(t, b.Pool, "b.q", `{}`)
	}

	a1 := b.read(t, a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, a1, 1)
	for i := 0; i < 5; i++ { // five pages out at once: five new slots
		require.Len(t, b.read(t, bc, "b.q", nil, "wb", 1, "1 hour"), 1)
	}
	a2 := b.read(t, a, "a.q", nil, "wa", 1, "1 hour") // a's first page is open: a new slot
	require.Len(t, a2, 1)
	l1, l2 := a1[0].LeaseID, a2[0].LeaseID
	require.NotEqual(t, int64(6), l2>>32-l1>>32, "a's ids show how many slots b opened")
	require.GreaterOrEqual(t, l1, int64(1)<<62)
	require.GreaterOrEqual(t, l2, int64(1)<<62)
	r1, r2 := rawLease(t, b, l1), rawLease(t, b, l2)
	require.Equal(t, int64(6), r2>>32-r1>>32, "fixture: b's five slots lie between a's two")
	require.NotEqual(t, r1, l1)

	// The next page of a's first slot: internally page + 1, publicly unrelated.
	require.Equal(t, 1, b.ack(t, a, l1, nil))
	a3 := b.read(t, a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, a3, 1)
	l3 := a3[0].LeaseID
	require.Equal(t, r1+1, rawLease(t, b, l3), "fixture: the slot's next page")
	require.NotEqual(t, l1+1, l3)
	require.NotEqual(t, l1>>32, l3>>32)

	// Out of a tenant's reach: the key and the permutation.
	_, err := bc.Exec(b.ctx, "SELECT k FROM fanout.lease_key")
	requireSQLState(t, err, "42501")
	_, err = bc.Exec(b.ctx, "SELECT fanout._lease_code(1, true)")
	requireSQLState(t, err, "42501")

	// a's lease by its internal id: unknown, for b and for a alike.
	_, err = bc.Exec(b.ctx, "SELECT fanout.ack($1)", r2)
	requireSQLState(t, err, "PGQ10")
	_, err = a.Exec(b.ctx, "SELECT fanout.ack($1)", r2)
	requireSQLState(t, err, "PGQ10")
	// By its id: b is refused (no grant on a's topic), a acks it.
	_, err = bc.Exec(b.ctx, "SELECT fanout.ack($1)", l2)
	requireSQLState(t, err, "PGQ21")
	require.Equal(t, 1, b.ack(t, a, l2, nil))
	require.Equal(t, 1, b.ack(t, a, l3, nil))
}

// A consumer that acks its previous page with its next read (read(...,
// ack =>), one transaction per page) writes its lease slot once per page:
// the ack's settle and the next page go into the slot with one update
// (fanout._ack's p_defer, fanout._lease_open's p_settling). It took two
// updates (settle, then the slot's reuse), leaving three versions of the
// row per transaction. Counted by a row trigger the test installs on
// fanout.lease (PostgreSQL 15's pg_stat_xact_* views also show counts of
// earlier transactions that were not flushed yet). When the read opens no
// page the settle is still written (one update) and the page is closed.
func TestReadAckWritesTheSlotOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.Pool.Exec(b.ctx, `
		CREATE TABLE public.lease_writes (xid xid8 NOT NULL);
		CREATE FUNCTION public.lease_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.lease_writes VALUES (pg_current_xact_id()); RETURN NULL; END $$;
		CREATE TRIGGER zz_lease_writes AFTER UPDATE ON fanout.lease FOR EACH ROW
		    EXECUTE FUNCTION public.lease_writes()`)
	require.NoError(t, err)
	b.createTopic(t, b.Pool, "q")
	for i := 0; i < 3; i++ {
		b.publish(t, b.Pool, "q", `{}`)
	}
	conn := b.Conn(t)
	page := b.read(t, conn, "q", nil, "c", 1, "30 seconds")
	require.Len(t, page, 1)
	updates := func(tx querier) int {
		t.Helper()
		var n int
		require.NoError(t, tx.QueryRow(b.ctx,
			`SELECT count(*) FROM public.lease_writes WHERE xid = pg_current_xact_id()`).Scan(&n))
		return n
	}
	prev := page[0].LeaseID
	for i := 0; i < 2; i++ {
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		next, err := b.readAcking(t, tx, "q", nil, "c", 1, prev)
		require.NoError(t, err)
		require.Len(t, next, 1)
		require.Equal(t, 1, updates(tx), "lease rows updated by read(ack =>) with a next page")
		require.NoError(t, tx.Commit(b.ctx))
		require.Equal(t, rawLease(t, b, prev)+1, rawLease(t, b, next[0].LeaseID), "the same slot's next page")
		prev = next[0].LeaseID
	}
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	none, err := b.readAcking(t, tx, "q", nil, "c", 1, prev)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, 1, updates(tx), "the settle of the last page")
	require.NoError(t, tx.Commit(b.ctx))
	var open int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.lease WHERE open_count > 0`).Scan(&open))
	require.Zero(t, open)
	require.Zero(t, b.ack(t, b.Pool, prev, nil), "settled")
	var bad int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&bad))
	require.Zero(t, bad)
}
