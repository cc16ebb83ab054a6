package tests

// Lease ids across tenants (security review, finding 4). Slots come from one
// sequence for every topic and the id read returned was slot * 2^32 +
// epoch * 2^16 + page, so tenant a's next new slot jumped by the number of
// slots tenant b opened meanwhile, and a's consecutive pages of one slot
// differed by 1. The id read returns is now a keyed permutation of that
// internal id (fanout._lease_code), decoded where an id comes back
// (fanout._lease_raw); the table keeps the internal one.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/testdb"
)

// rawLease is the internal id (fanout.lease.lease_id: slot * 2^32 + epoch *
// 2^16 + page) of a lease id read returned, through the test's superuser
// connection: for tests that look a lease up in the table or check which
// slot and page a read used.
func rawLease(t *testing.T, b *bundle, id int64) int64 {
	t.Helper()
	var raw *int64
	var coded bool // ids were the internal ones before fanout._lease_raw existed
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT to_regprocedure('fanout._lease_raw(bigint)') IS NOT NULL`).Scan(&coded))
	if !coded {
		return id
	}
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._lease_raw($1)`, id).Scan(&raw))
	require.NotNil(t, raw, "lease id %d decodes to nothing", id)
	return *raw
}

// publicLease is the id read returns for an internal one (the inverse of rawLease).
func publicLease(t *testing.T, b *bundle, raw int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT fanout._lease_code($1, true)`, raw).Scan(&id))
	return id
}

// pgErrOf is the PostgreSQL error of err (nil when it is none).
func pgErrOf(err error) *pgconn.PgError {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

type leaseTenants struct {
	b     *bundle
	a, a2 *pgx.Conn // tenant a's consumer role, two sessions
	bc    *pgx.Conn // tenant b's consumer role
}

func leaseTenantSetup(t *testing.T) *leaseTenants {
	b := setup(t)
	b.tIsolate(t)
	aName, a := b.tRole(t, "cons_a", "fanout_consumer")
	bName, bc := b.tRole(t, "cons_b", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", aName, "consume")
	b.tGrant(t, b.Pool, "b.%", bName, "consume")
	a2 := b.qConnAs(t, testdb.WithUser(b.URL, aName))
	return &leaseTenants{b: b, a: a, a2: a2, bc: bc}
}

// Tenant a's ids do not tell how many leases tenant b opened between them.
// Five trials: a opens a page (a new slot of a fresh group), b opens k pages
// at once (k new slots), a opens a second page while its first is out (a
// new slot). With slot-numbered ids, a's two ids differed by exactly
// (k + 1) << 32 in every trial; the internal ids still do (the fixture),
// the ids a sees do not. The next page of a's slot (internally the id + 1)
// is no neighbour of the previous one either.
func TestTenantLeaseIDsRevealNothingAcrossTenants(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	for k := 0; k < 5; k++ {
		aq, bq := fmt.Sprintf("a.q%d", k), fmt.Sprintf("b.q%d", k)
		b.createTopic(t, b.Pool, aq)
		b.createTopic(t, b.Pool, bq)
		for i := 0; i < 3; i++ {
			b.publish(t, b.Pool, aq, `{}`)
		}
		for i := 0; i < k; i++ {
			b.publish(t, b.Pool, bq, `{}`)
		}
		a1 := b.read(t, f.a, aq, nil, "wa", 1, "1 hour")
		require.Len(t, a1, 1)
		for i := 0; i < k; i++ { // b's pages stay out: k new slots
			require.Len(t, b.read(t, f.bc, bq, nil, "wb", 1, "1 hour"), 1)
		}
		a2 := b.read(t, f.a, aq, nil, "wa", 1, "1 hour") // a's first page is out: a new slot
		require.Len(t, a2, 1)
		l1, l2 := a1[0].LeaseID, a2[0].LeaseID
		require.Positive(t, l1)
		require.Positive(t, l2)
		r1, r2 := rawLease(t, b, l1), rawLease(t, b, l2)
		require.Equal(t, int64(k+1), r2>>32-r1>>32, "fixture: b's %d slots lie between a's two", k)
		require.NotEqual(t, int64(k+1), l2>>32-l1>>32, "trial %d: a's ids show how many slots b opened", k)
		require.NotEqual(t, r1, l1)

		// The slot's next page: internally the id + 1, for a unrelated.
		require.Equal(t, 1, b.ack(t, f.a, l1, nil))
		a3 := b.read(t, f.a, aq, nil, "wa", 1, "1 hour")
		require.Len(t, a3, 1)
		l3 := a3[0].LeaseID
		require.Equal(t, r1+1, rawLease(t, b, l3), "fixture: the slot's next page")
		require.NotEqual(t, l1>>16, l3>>16, "trial %d: a's next page of one slot shows the slot", k)
		require.Equal(t, 1, b.ack(t, f.a, l2, nil))
		require.Equal(t, 1, b.ack(t, f.a, l3, nil))
	}

	// Out of a tenant's reach: the key and the permutation.
	_, err := f.bc.Exec(b.ctx, "SELECT k FROM fanout.lease_key")
	requireSQLState(t, err, "42501")
	_, err = f.bc.Exec(b.ctx, "SELECT fanout._lease_code(1, true)")
	requireSQLState(t, err, "42501")
	_, err = f.bc.Exec(b.ctx, "SELECT fanout._lease_raw(1)")
	requireSQLState(t, err, "42501")
}

// Ids that were never handed out, in either form, are unknown leases
// (PGQ10) to ack, nack, extend_lease and read(..., ack =>): random positive
// ids, and the internal id of a's own open lease (the form read returned
// before; on an install without leases of the old release there is none to
// accept).
func TestTenantLeaseIDsForgedAreUnknown(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	b.createTopic(t, b.Pool, "a.q")
	for i := 0; i < 2; i++ {
		b.publish(t, b.Pool, "a.q", `{}`)
	}
	own := b.read(t, f.a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, own, 1)
	raw := rawLease(t, b, own[0].LeaseID)
	slot, epoch := raw>>32, (raw>>16)&65535
	rng := rand.New(rand.NewPCG(uint64(raw), 27))
	forged := []int64{raw, raw + 1, (slot+1)<<32 | epoch<<16 | 1, own[0].LeaseID ^ 1, own[0].LeaseID + 1}
	for i := 0; i < 20; i++ {
		forged = append(forged, rng.Int64N(1<<63-1)+1)
	}
	for _, id := range forged {
		if id == own[0].LeaseID {
			continue
		}
		for _, sql := range []string{
			`SELECT fanout.ack($1)`,
			`SELECT fanout.nack($1)`,
			`SELECT fanout.extend_lease($1, '1 minute')`,
			`SELECT count(*) FROM fanout.read('a.q', consumer => 'wa', ack => $1)`,
		} {
			_, err := f.a.Exec(b.ctx, sql, id)
			requireSQLState(t, err, "PGQ10")
		}
	}
	var open int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT open_count FROM fanout.lease WHERE lease_id = $1`, raw).Scan(&open))
	require.Equal(t, 1, open, "nothing settled")
	require.Equal(t, 1, b.ack(t, f.a, own[0].LeaseID, nil))
}

// Another tenant's lease is refused exactly as one that does not exist:
// same SQLSTATE (PGQ10, not PGQ21), same message apart from the id, same
// hint, by ack, nack, extend_lease and read(..., ack =>) on the caller's own
// topic; a's lease is untouched and a acks it.
func TestTenantLeaseIDOfAnotherTenantIsUnknown(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	b.createTopic(t, b.Pool, "a.q")
	b.createTopic(t, b.Pool, "b.q")
	b.publish(t, b.Pool, "a.q", `{}`)
	b.publish(t, b.Pool, "b.q", `{}`)
	own := b.read(t, f.a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, own, 1)
	foreign := own[0].LeaseID
	missing := foreign ^ (1 << 40)
	for _, sql := range []string{
		`SELECT fanout.ack($1)`,
		`SELECT fanout.nack($1)`,
		`SELECT fanout.extend_lease($1, '1 minute')`,
		`SELECT count(*) FROM fanout.read('b.q', consumer => 'wb', ack => $1)`,
	} {
		_, errF := f.bc.Exec(b.ctx, sql, foreign)
		_, errM := f.bc.Exec(b.ctx, sql, missing)
		requireSQLState(t, errF, "PGQ10")
		requireSQLState(t, errM, "PGQ10")
		ef, em := pgErrOf(errF), pgErrOf(errM)
		require.Equal(t, strings.ReplaceAll(em.Message, fmt.Sprint(missing), "ID"),
			strings.ReplaceAll(ef.Message, fmt.Sprint(foreign), "ID"), sql)
		require.Equal(t, em.Hint, ef.Hint, sql)
		require.Equal(t, em.Detail, ef.Detail, sql)
	}
	var open int
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT open_count FROM fanout.lease WHERE lease_id = $1`,
		rawLease(t, b, foreign)).Scan(&open))
	require.Equal(t, 1, open, "nothing settled")
	require.Len(t, b.read(t, f.bc, "b.q", nil, "wb", 1, "1 hour"), 1, "b's own read still works")
	require.Equal(t, 1, b.ack(t, f.a, foreign, nil))
}

// Fencing is kept: a's page expires and a's other session takes it over;
// the stale holder's ack, nack, extension and read(..., ack =>) raise PGQ11
// and settle nothing; the new holder acks.
func TestTenantLeaseIDStaleAfterTakeover(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	b.createTopic(t, b.Pool, "a.q")
	b.publish(t, b.Pool, "a.q", `{}`)
	stale := b.read(t, f.a, "a.q", nil, "w1", 1, "1 hour")
	require.Len(t, stale, 1)
	_, err := b.Pool.Exec(b.ctx, `UPDATE fanout.lease SET expires_at = now() - interval '1 second' WHERE lease_id = $1`,
		rawLease(t, b, stale[0].LeaseID))
	require.NoError(t, err)
	fresh := b.read(t, f.a2, "a.q", nil, "w2", 1, "1 hour")
	require.Len(t, fresh, 1)
	require.Equal(t, stale[0].MessageID, fresh[0].MessageID)
	for _, sql := range []string{
		`SELECT fanout.ack($1)`,
		`SELECT fanout.nack($1)`,
		`SELECT fanout.extend_lease($1, '1 minute')`,
		`SELECT count(*) FROM fanout.read('a.q', consumer => 'w1', ack => $1)`,
	} {
		_, err := f.a.Exec(b.ctx, sql, stale[0].LeaseID)
		requireSQLState(t, err, "PGQ11")
	}
	require.Equal(t, 1, b.ack(t, f.a2, fresh[0].LeaseID, nil))
}

// A lease of the old release, presented by its internal id (what read
// returned before), is accepted while it is its slot's current page and
// that page was opened before fanout.lease_key.legacy_until (set by the
// upgrade; here as the upgrade sets it, on a page of this install): by its
// own tenant only, and not once the slot moved on to a later page. Without
// the window (a fresh install) the same id is unknown.
func TestTenantLeaseIDOfTheOldReleaseDuringUpgradeWindow(t *testing.T) {
	t.Parallel()
	f := leaseTenantSetup(t)
	b := f.b
	b.createTopic(t, b.Pool, "a.q")
	for i := 0; i < 3; i++ {
		b.publish(t, b.Pool, "a.q", `{}`)
	}
	page := b.read(t, f.a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, page, 1)
	raw := rawLease(t, b, page[0].LeaseID)
	_, err := f.a.Exec(b.ctx, `SELECT fanout.ack($1)`, raw)
	requireSQLState(t, err, "PGQ10")

	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.lease_key SET legacy_until = clock_timestamp() + interval '10 minutes'`)
	require.NoError(t, err)
	_, err = f.bc.Exec(b.ctx, `SELECT fanout.ack($1)`, raw)
	requireSQLState(t, err, "PGQ10") // another tenant: as unknown
	require.Equal(t, 1, b.ack(t, f.a, raw, nil), "the old form of a page opened before the upgrade")
	require.Equal(t, 0, b.ack(t, f.a, raw, nil), "settled")
	next := b.read(t, f.a, "a.q", nil, "wa", 1, "1 hour")
	require.Len(t, next, 1)
	require.Equal(t, raw+1, rawLease(t, b, next[0].LeaseID), "fixture: the slot's next page")
	// The old form of a page that is no longer the slot's current one.
	_, err = f.a.Exec(b.ctx, `SELECT fanout.ack($1)`, raw)
	requireSQLState(t, err, "PGQ10")
	// Once the window has passed, the old form of a page opened after it.
	_, err = b.Pool.Exec(b.ctx, `UPDATE fanout.lease_key SET legacy_until = clock_timestamp() - interval '1 hour'`)
	require.NoError(t, err)
	_, err = f.a.Exec(b.ctx, `SELECT fanout.ack($1)`, raw+1)
	requireSQLState(t, err, "PGQ10")
	require.Equal(t, 1, b.ack(t, f.a, next[0].LeaseID, nil))
}
