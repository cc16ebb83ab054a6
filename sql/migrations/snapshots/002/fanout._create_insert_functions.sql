-- fanout._create_insert_functions(p_topic_id): (re)creates the topic's two
-- insert functions in fanout_data, named from its message table:
-- m<id>_insert(payload, headers, message_group) RETURNS bigint and
-- m<id>_insert_batch(payloads[], headers[], message_groups[]) RETURNS SETOF
-- bigint (ids ascending, i.e. in input order), and
-- m<id>_insert_one(id, payload, headers, message_group, deliver_at, priority,
-- seq) for publishes with a dedupe key, a delivery time, a priority or a
-- sequence (id NULL = the next one), and
-- m<id>_insert_keyed(payloads[], headers[], message_groups[], dedupe_keys[],
-- deliver_at, priority, dedupe_window) RETURNS bigint[] for
-- fanout._publish_batch_set: in one statement it takes the ids (in input
-- order), claims the batch's distinct keys in fanout.dedupe (in key order)
-- and inserts the messages whose key it claimed or that have none. Each
-- element's id comes back in input order: its own, that of the first
-- element with the same key, or NULL when the key was not claimed
-- (published before, or by a concurrent transaction: the caller looks it
-- up in a new statement, which sees that transaction).
-- Their INSERTs are static SQL,
-- so each session plans them once: planning an INSERT into a partitioned
-- table on every publish (dynamic SQL) cost more than the insert itself.
-- On a partitioned topic they also set each message's kpart (the topic's
-- partition count is compiled in: fanout.alter_topic regenerates them).
-- Nobody but the owner may call them. Tables: fanout.topic; creates functions.
CREATE OR REPLACE FUNCTION fanout._create_insert_functions(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_seq   text;
    v_parts int;
    v_kcol  text := '';
BEGIN
    SELECT t.data_table, t.seq_name, t.partitions INTO STRICT v_table, v_seq, v_parts
    FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF v_parts IS NOT NULL THEN
        -- Partitioned topic: each message's key partition (fanout._kpart_of;
        -- no message_group: at random), with the count as a constant.
        v_kcol := ', kpart';
    END IF;
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payload jsonb, p_headers jsonb, p_message_group text)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I (headers, message_group, payload%3$s)
            VALUES (p_headers, p_message_group, p_payload%4$s)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert', v_table, v_kcol, fanout._kpart_expr(v_parts, 'p_message_group'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payloads jsonb[], p_headers jsonb[], p_message_groups text[])
        RETURNS SETOF bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        BEGIN
            RETURN QUERY
            WITH ins AS (
                INSERT INTO fanout_data.%2$I (headers, message_group, payload%3$s)
                SELECT coalesce(u.h, '{}'::jsonb), u.g, u.p%4$s
                FROM unnest(p_payloads, p_headers, p_message_groups) WITH ORDINALITY AS u(p, h, g, ord)
                ORDER BY u.ord
                RETURNING id)
            SELECT ins.id FROM ins ORDER BY ins.id;
        END
        $body$$ddl$, v_table || '_insert_batch', v_table, v_kcol, fanout._kpart_expr(v_parts, 'u.g'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_id bigint, p_payload jsonb, p_headers jsonb,
                                                   p_message_group text, p_deliver_at timestamptz,
                                                   p_priority smallint, p_seq bigint)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority, seq%4$s)
            VALUES (coalesce(p_id, nextval(%3$L::regclass)), p_headers, p_message_group, p_payload, p_deliver_at,
                    p_priority, p_seq%5$s)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert_one', v_table, 'fanout_data.' || quote_ident(v_seq), v_kcol,
        fanout._kpart_expr(v_parts, 'p_message_group'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payloads jsonb[], p_headers jsonb[], p_message_groups text[],
                                                   p_keys text[], p_deliver_at timestamptz, p_priority smallint,
                                                   p_window interval)
        RETURNS bigint[]
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_ids bigint[];
        BEGIN
            WITH src AS MATERIALIZED (
                SELECT u.p, u.h, u.g, u.k, u.ord, nextval(%3$L::regclass) AS id
                FROM unnest(p_payloads, p_headers, p_message_groups, p_keys) WITH ORDINALITY AS u(p, h, g, k, ord)),
            claimed AS (
                INSERT INTO fanout.dedupe AS d (topic_id, dedupe_key, message_id, created_at)
                SELECT %6$s, f.k, f.id, clock_timestamp()
                FROM (SELECT DISTINCT ON (s.k) s.k, s.id FROM src s WHERE s.k IS NOT NULL ORDER BY s.k, s.ord) f
                ORDER BY f.k
                ON CONFLICT (topic_id, dedupe_key) DO UPDATE
                SET message_id = excluded.message_id, created_at = excluded.created_at
                WHERE d.created_at < clock_timestamp() - p_window
                RETURNING d.dedupe_key, d.message_id),
            res AS MATERIALIZED (
                SELECT s.p, s.h, s.g, s.ord, s.id, CASE WHEN s.k IS NULL THEN s.id ELSE c.message_id END AS got
                FROM src s LEFT JOIN claimed c ON c.dedupe_key = s.k),
            ins AS (
                INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority%4$s)
                SELECT r.id, coalesce(r.h, '{}'::jsonb), r.g, r.p, p_deliver_at, p_priority%5$s
                FROM res r WHERE r.got = r.id
                ORDER BY r.ord)
            SELECT array_agg(r.got ORDER BY r.ord) INTO v_ids FROM res r;
            RETURN v_ids;
        END
        $body$$ddl$, v_table || '_insert_keyed', v_table, 'fanout_data.' || quote_ident(v_seq), v_kcol,
        fanout._kpart_expr(v_parts, 'r.g'), p_topic_id);
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb, jsonb, text) FROM PUBLIC', v_table || '_insert');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb[], jsonb[], text[], text[], timestamptz, smallint, interval) FROM PUBLIC',
                   v_table || '_insert_keyed');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(bigint, jsonb, jsonb, text, timestamptz, smallint, bigint) FROM PUBLIC',
                   v_table || '_insert_one');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb[], jsonb[], text[]) FROM PUBLIC',
                   v_table || '_insert_batch');
END
$fn$;
