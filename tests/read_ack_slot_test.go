package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
