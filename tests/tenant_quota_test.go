package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Quotas per grant (fanout.set_quota), against a hostile tenant admin: it
// cannot set or raise its own quota (PGQ21), its topics stop at max_topics
// (PGQ25) also when it grants a narrower pattern to another role it
// controls, groups stop at max_groups, and publishing stops once
// maintenance measures the pattern's topics over max_bytes and resumes once
// the quota is lifted; another tenant is untouched throughout. Two
// creators racing for the last topic: one gets it, the other PGQ25.
func TestTenantQuotas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tIsolate(t)
	admName, adm := b.tRole(t, "adm_a", "fanout_admin")
	b.tGrant(t, b.Pool, "a.%", admName, "admin")
	adm2Name, adm2 := b.tRole(t, "adm2_a", "fanout_admin")
	prodName, prod := b.tRole(t, "prod_a", "fanout_producer")
	b.tGrant(t, b.Pool, "a.%", prodName, "publish")
	consName, cons := b.tRole(t, "cons_a", "fanout_consumer")
	b.tGrant(t, b.Pool, "a.%", consName, "consume")
	admBName, admB := b.tRole(t, "adm_b", "fanout_admin")
	b.tGrant(t, b.Pool, "b.%", admBName, "admin")

	// Only the operator sets quotas.
	_, err := adm.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'admin', max_topics => 1000)`, admName)
	requireSQLState(t, err, "PGQ21")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'admin', max_topics => -1)`, admName)
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('z.%', $1::regrole, 'admin', max_topics => 1)`, admName)
	requireSQLState(t, err, "PGQ03")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'admin', max_topics => 3, max_groups => 2)`, admName)
	require.NoError(t, err)
	var quota *int64
	require.NoError(t, adm.QueryRow(b.ctx, `SELECT max_topics FROM fanout.topic_grants WHERE pattern = 'a.%' AND role = $1`, admName).Scan(&quota))
	require.Equal(t, int64(3), *quota, "the tenant sees its quota")

	// Topics: two, then two creators race for the third.
	b.createTopic(t, adm, "a.t1", "semantics => 'pubsub'")
	b.createTopic(t, adm, "a.t2")
	t1 := b.count(t, `SELECT topic_id FROM fanout.topic WHERE topic = 'a.t1'`)
	require.Equal(t, t1, b.createTopic(t, adm, "a.t1", "semantics => 'pubsub'"), "an existing topic is not counted again")
	b.tGrant(t, adm, "a.x%", adm2Name, "admin") // the tenant delegates a narrower pattern
	tx, err := adm.Begin(b.ctx)
	require.NoError(t, err)
	b.createTopic(t, tx, "a.t3")
	done := make(chan error, 1)
	go func() {
		_, err := adm2.Exec(b.ctx, `SELECT fanout.create_topic('a.x1')`)
		done <- err
	}()
	// The second creator waits for the first (on the grant's row).
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE usename = '`+adm2Name+`' AND wait_event_type = 'Lock'`) == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, tx.Commit(b.ctx))
	requireSQLState(t, <-done, "PGQ25")
	_, err = adm.Exec(b.ctx, `SELECT fanout.create_topic('a.t4')`)
	requireSQLState(t, err, "PGQ25")
	b.createTopic(t, admB, "b.t1") // another tenant: no quota
	b.createTopic(t, admB, "b.t2")
	b.createTopic(t, admB, "b.t3")
	b.createTopic(t, admB, "b.t4")

	// Groups: two on the pattern's topics together.
	_, err = cons.Exec(b.ctx, `SELECT fanout.subscribe('a.t1', 'g1')`)
	require.NoError(t, err)
	_, err = cons.Exec(b.ctx, `SELECT fanout.subscribe('a.t1', 'g2')`)
	require.NoError(t, err)
	_, err = cons.Exec(b.ctx, `SELECT fanout.subscribe('a.t1', 'g3')`)
	requireSQLState(t, err, "PGQ25")
	_, err = cons.Exec(b.ctx, `SELECT fanout.subscribe('a.t1', 'g1')`)
	require.NoError(t, err, "an existing group subscribes again")

	// Bytes: over the quota once maintenance measured it.
	b.publish(t, prod, "a.t2", `{"n":1}`)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'admin', max_bytes => 1)`, admName)
	require.NoError(t, err)
	b.publish(t, prod, "a.t2", `{"n":2}`) // not measured yet
	require.Positive(t, b.count(t, `SELECT count(*) FROM fanout.maint_operations() WHERE func = 'fanout._measure_usage'`))
	require.Positive(t, b.count(t, `SELECT fanout._measure_usage()`))
	_, err = prod.Exec(b.ctx, `SELECT fanout.publish('a.t2', '{"n":3}')`)
	requireSQLState(t, err, "PGQ25")
	_, err = prod.Exec(b.ctx, `SELECT fanout.publish_batch('a.t1', ARRAY['{}'::jsonb])`)
	requireSQLState(t, err, "PGQ25")
	b.publish(t, b.Pool, "b.t1", `{}`) // another tenant's topics publish
	// Lifted: the next measuring call forgets the block.
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_quota('a.%', $1::regrole, 'admin', max_topics => 3, max_groups => 2)`, admName)
	require.NoError(t, err)
	b.count(t, `SELECT fanout._measure_usage()`)
	b.publish(t, prod, "a.t2", `{"n":4}`)
}

// Consumer names are normalized (NFC) once, at the door, by read and by
// heartbeat alike: a consumer that reads as "e" + combining acute and
// heartbeats as the precomposed "é" is one member.
func TestTenantConsumerNamesNFC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "nfc", "semantics => 'pubsub'")
	_, err := b.Pool.Exec(b.ctx, `SELECT fanout.subscribe('nfc', 'g')`)
	require.NoError(t, err)
	b.publish(t, b.Pool, "nfc", `{}`)
	ms := b.read(t, b.Pool, "nfc", ptr("g"), "caf\u0065\u0301", 10, "1 minute")
	require.Len(t, ms, 1)
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.heartbeat('nfc', 'g', $1)`, "caf\u00e9")
	require.NoError(t, err)
	var names []string
	rows, err := b.Pool.Query(b.ctx, `SELECT consumer FROM fanout.member ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		names = append(names, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"caf\u00e9"}, names)
	var consumer string
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT consumer FROM fanout.lease WHERE lease_id = fanout._lease_raw($1)`, ms[0].LeaseID).Scan(&consumer))
	require.Equal(t, "caf\u00e9", consumer)
}
