package tests

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A producer-only login can publish but not consume, administer or touch a
// table; a consumer-only login can consume but not publish or create topics;
// a login with no fanout role can do nothing.
func TestQueueRolesAndPrivileges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "secure"
	topicID := b.createTopic(t, b.Pool, topic)
	dataTable := pgx.Identifier{"fanout_data", fmt.Sprintf("m%d", topicID)}.Sanitize()
	partTable := pgx.Identifier{"fanout_data", fmt.Sprintf("m%d_p0", topicID)}.Sanitize()
	seq := fmt.Sprintf("fanout_data.m%d_id_seq", topicID)

	_, producerURL := b.qRole(t, "fanout_producer")
	_, consumerURL := b.qRole(t, "fanout_consumer")
	_, nobodyURL := b.qRole(t, "") // logs in, no fanout role
	producer, consumer, nobody := b.qConnAs(t, producerURL), b.qConnAs(t, consumerURL), b.qConnAs(t, nobodyURL)

	denied := func(t *testing.T, c *pgx.Conn, who, sql string, args ...any) {
		t.Helper()
		_, err := c.Exec(b.ctx, sql, args...)
		require.Error(t, err, "%s: %s", who, sql)
		require.Equal(t, "42501", qState(err), "%s: %s: %v", who, sql, err)
	}

	// Producer: publish works, nothing else.
	var id int64
	require.NoError(t, producer.QueryRow(b.ctx, "SELECT fanout.publish($1, '{\"by\":\"producer\"}')", topic).Scan(&id))
	var n int
	require.NoError(t, producer.QueryRow(b.ctx,
		"SELECT count(*) FROM fanout.publish_batch($1, ARRAY['{}', '{}']::jsonb[])", topic).Scan(&n))
	require.Equal(t, 2, n)
	for _, sql := range []string{
		"SELECT * FROM fanout.read('secure')",
		"SELECT fanout.ack(1)",
		"SELECT fanout.nack(1)",
		"SELECT fanout.extend_lease(1, '1 minute')",
		"SELECT fanout.create_topic('mine')",
		"SELECT fanout.drop_topic('secure', true)",
		"SELECT fanout.replay_dead_letters('secure', NULL, ARRAY[1::bigint])",
		"SELECT fanout._topic('secure'::text)",
		"SELECT fanout._cleanup_partitions()",
		"SELECT * FROM fanout.dead_letters",
		"SELECT * FROM fanout.topic",
		"UPDATE fanout.topic SET max_attempts = 1",
		"SELECT * FROM fanout.lease",
		"DELETE FROM fanout.consumer_group",
		"SELECT * FROM " + dataTable,
		"SELECT * FROM " + partTable,
		"INSERT INTO " + dataTable + " (payload) VALUES ('{}')",
		"INSERT INTO " + partTable + " (payload) VALUES ('{}')",
		"SELECT nextval('" + seq + "')",
	} {
		denied(t, producer, "producer", sql)
	}

	// Consumer: reads and acks what the producer published, cannot publish.
	ms := b.read(t, consumer, topic, nil, "c", 10, "1 minute")
	require.Len(t, ms, 3)
	require.Equal(t, id, ms[0].MessageID)
	require.JSONEq(t, `{"by":"producer"}`, string(ms[0].Payload))
	require.Equal(t, 3, b.ack(t, consumer, ms[0].LeaseID, nil))
	var dead int
	require.NoError(t, consumer.QueryRow(b.ctx, "SELECT count(*) FROM fanout.dead_letters").Scan(&dead))
	require.Zero(t, dead)
	for _, sql := range []string{
		"SELECT fanout.publish('secure', '{}')",
		"SELECT fanout.publish_batch('secure', ARRAY['{}']::jsonb[])",
		"SELECT fanout.create_topic('mine')",
		"SELECT fanout.alter_topic('secure', max_attempts => 1)",
		"SELECT fanout.drop_topic('secure', true)",
		"SELECT fanout.run_maintenance()",
		"SELECT fanout._lock_lease(1)",
		"SELECT * FROM fanout.lease",
		"DELETE FROM fanout.lease",
		"UPDATE fanout.consumer_group SET cur_id = 0",
		"DELETE FROM fanout.dead_letter",
		"SELECT * FROM " + partTable,
		"DELETE FROM " + partTable,
	} {
		denied(t, consumer, "consumer", sql)
	}

	// No fanout role: not even the schema.
	for _, sql := range []string{
		"SELECT fanout.publish('secure', '{}')",
		"SELECT * FROM fanout.read('secure')",
		"SELECT * FROM fanout.topics",
		"SELECT * FROM " + partTable,
	} {
		denied(t, nobody, "nobody", sql)
	}

	// Both can look up the topic's LISTEN channel and sizes through the
	// views they are granted (the views' helper functions run as definer).
	for who, c := range map[string]*pgx.Conn{"producer": producer, "consumer": consumer} {
		var channel string
		require.NoError(t, c.QueryRow(b.ctx, "SELECT channel FROM fanout.topics WHERE topic = $1", topic).Scan(&channel),
			"%s reads fanout.topics", who)
		require.Equal(t, fmt.Sprintf("fanout_%d", topicID), channel)
	}
	var lag int64
	require.NoError(t, consumer.QueryRow(b.ctx, "SELECT lag_messages FROM fanout.groups WHERE topic = $1", topic).Scan(&lag))
	require.Zero(t, lag)
	denied(t, producer, "producer", "SELECT * FROM fanout.groups")

	// Nothing the denied calls tried was written.
	require.Equal(t, int64(3), b.qMessageCount(t, topic))
	var exists bool
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT EXISTS (SELECT 1 FROM fanout.topic WHERE topic = 'mine')").Scan(&exists))
	require.False(t, exists)
}

// Every function in schema fanout pins search_path; every function any fanout
// role may call is SECURITY DEFINER; PUBLIC may execute none.
func TestQueueFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type fn struct {
		sig     string
		secdef  bool
		pinned  bool
		granted bool // EXECUTE granted to a fanout_* role
		public  bool // EXECUTE for PUBLIC
		trigger bool
		proc    bool // a procedure that commits: no SET clause, not SECURITY DEFINER
	}
	rows, err := b.Pool.Query(b.ctx, `
		SELECT p.oid::regprocedure::text, p.prosecdef,
		       coalesce('search_path=pg_catalog, fanout, pg_temp' = ANY (p.proconfig), false),
		       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		               JOIN pg_roles r ON r.oid = a.grantee
		               WHERE r.rolname IN ('fanout_admin', 'fanout_producer', 'fanout_consumer')
		                 AND a.privilege_type = 'EXECUTE'),
		       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		               WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
		       p.prorettype = 'trigger'::regtype, p.prokind = 'p'
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'fanout' ORDER BY 1`)
	require.NoError(t, err)
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.sig, &f.secdef, &f.pinned, &f.granted, &f.public, &f.trigger, &f.proc)
	})
	require.NoError(t, err)
	require.Greater(t, len(fns), 30)

	public := 0
	for _, f := range fns {
		if f.proc {
			// A procedure that commits may neither SET nor be SECURITY
			// DEFINER (PostgreSQL refuses its COMMIT): it runs with the
			// caller's rights and every function it calls is checked here.
			require.False(t, f.secdef || f.pinned || f.public, "%s: a procedure runs as its caller, for operators only", f.sig)
			continue
		}
		require.True(t, f.pinned, "%s must SET search_path = pg_catalog, fanout, pg_temp", f.sig)
		if f.granted {
			public++
			require.True(t, f.secdef, "%s is callable by a fanout role, so it must be SECURITY DEFINER", f.sig)
		}
		if !f.trigger { // trigger functions cannot be called directly
			require.False(t, f.public, "PUBLIC may execute %s", f.sig)
		}
	}
	require.GreaterOrEqual(t, public, 10)
	for _, must := range []string{"fanout.publish(text,jsonb,jsonb,text,boolean,text,timestamp with time zone,interval,integer,bigint)", "fanout.read(text,text,text,integer,interval,bigint,integer,bigint)",
		"fanout.ack(bigint,bigint[])", "fanout.create_topic(text,text,text,interval,interval,boolean,interval,integer,integer,interval,boolean,interval,interval,boolean,interval,integer,boolean,text,interval)"} {
		found := false
		for _, f := range fns {
			if f.sig == must {
				found = true
				require.True(t, f.granted && f.secdef && f.pinned, must)
			}
		}
		require.True(t, found, must)
	}
}
