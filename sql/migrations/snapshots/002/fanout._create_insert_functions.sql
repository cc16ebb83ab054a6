-- fanout._create_insert_functions(p_topic_id): (re)creates the topic's two
-- insert functions in fanout_data, named from its message table:
-- m<id>_insert(payload, headers, message_group) RETURNS bigint and
-- m<id>_insert_batch(payloads[], headers[], message_groups[]) RETURNS SETOF
-- bigint (ids ascending, i.e. in input order), and
-- m<id>_insert_one(id, payload, headers, message_group, deliver_at, priority,
-- seq) for publishes with a dedupe key, a delivery time, a priority or a
-- sequence (id NULL = the next one).
-- Their INSERTs are static SQL,
-- so each session plans them once: planning an INSERT into a partitioned
-- table on every publish (dynamic SQL) cost more than the insert itself.
-- Nobody but the owner may call them. Tables: fanout.topic; creates functions.
CREATE OR REPLACE FUNCTION fanout._create_insert_functions(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_seq   text;
BEGIN
    SELECT t.data_table, t.seq_name INTO STRICT v_table, v_seq FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payload jsonb, p_headers jsonb, p_message_group text)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I (headers, message_group, payload)
            VALUES (p_headers, p_message_group, p_payload)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert', v_table);
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payloads jsonb[], p_headers jsonb[], p_message_groups text[])
        RETURNS SETOF bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        BEGIN
            RETURN QUERY
            WITH ins AS (
                INSERT INTO fanout_data.%2$I (headers, message_group, payload)
                SELECT coalesce(u.h, '{}'::jsonb), u.g, u.p
                FROM unnest(p_payloads, p_headers, p_message_groups) WITH ORDINALITY AS u(p, h, g, ord)
                ORDER BY u.ord
                RETURNING id)
            SELECT ins.id FROM ins ORDER BY ins.id;
        END
        $body$$ddl$, v_table || '_insert_batch', v_table);
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
            INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority, seq)
            VALUES (coalesce(p_id, nextval(%3$L::regclass)), p_headers, p_message_group, p_payload, p_deliver_at,
                    p_priority, p_seq)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert_one', v_table, 'fanout_data.' || quote_ident(v_seq));
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb, jsonb, text) FROM PUBLIC', v_table || '_insert');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(bigint, jsonb, jsonb, text, timestamptz, smallint, bigint) FROM PUBLIC',
                   v_table || '_insert_one');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb[], jsonb[], text[]) FROM PUBLIC',
                   v_table || '_insert_batch');
END
$fn$;
