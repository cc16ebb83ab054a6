-- fanout._capture_generate(p_capture_id): (re)creates the capture's trigger
-- function fanout_data.capture_<id>() (fanout.capture_table's four
-- statement-level AFTER triggers run it) from the capture's row: the table's
-- name, the topic's name, id and message table, the key columns, columns and
-- exclude_columns are compiled in, so each statement runs static SQL whose
-- plans the session keeps, and no nested function call on the way of a
-- statement that passes (each call of a function with SET search_path costs
-- a GUC level and a search path recomputed twice). The generated function,
-- on every statement:
--   1. checks the writer's publish grant by fanout._may's rule, reads the
--      topic's bytes quota (fanout.quota_block) and its row, in one query;
--      refused or blocked, it calls fanout._enter, which raises PGQ21/PGQ25
--      as every publish does. So neither a capture nor a forged trigger
--      lets a writer publish where it may not, and a grant revoked between
--      two statements of one transaction refuses the second;
--   2. locks the topic's message table ACCESS SHARE (a static LOCK TABLE
--      where fanout._enter runs a dynamic one): fanout.drop_topic takes it
--      ACCESS EXCLUSIVE first, so the topic cannot be dropped under the
--      statement or before the writer's transaction ends; a table dropped
--      while this waited (42P01) takes the general path below;
--   3. builds the messages set-based from the transition tables (shape:
--      docs/capture.md; insert and delete straight from one side, update
--      zips old and new rows, which the transition tables hold in step: a
--      key change is a delete and an insert, an update of no captured
--      column publishes nothing), and in the same query whether any can
--      fail a check (size, message_group);
--   4. only then checks them one by one (fanout._check_message raises
--      PGQ05/PGQ04 naming the element), and a pubsub topic's
--      block_writes_without_subscriptions (PGQ07);
--   5. inserts through the topic's fanout_data.m<id>_insert_batch (static
--      call; the insert path every publish_batch takes, with its NOTIFY).
-- When the topic was dropped (PGQ01), re-created under another id, or is
-- sequence-ordered, it goes through fanout.publish_batch instead, which
-- raises what publish raises.
-- Row images are to_jsonb(row) and keys are read from it, so a column added,
-- dropped or renamed later changes the images from the next statement on,
-- without regenerating; a statement on a row whose image lacks a captured
-- key column (renamed or dropped) fails with PGQ03 until the owner calls
-- fanout.capture_table again, rather than publish a message without a key.
-- The body's dollar quote is a random tag found nowhere else in it, so no
-- topic or column name can end it early. Nobody but the owner may call it.
-- Tables: fanout.capture, fanout.topic; creates a function in fanout_data.
CREATE OR REPLACE FUNCTION fanout._capture_generate(p_capture_id bigint)
RETURNS regprocedure
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_c     fanout.capture;
    v_t     fanout.topic;
    v_fn    text := 'capture_' || p_capture_id;
    v_img   text;
    v_key   text;
    v_grp   text;
    v_nokey text;
    v_tag   text;
    v_sql   text;
BEGIN
    SELECT * INTO STRICT v_c FROM fanout.capture c WHERE c.capture_id = p_capture_id;
    v_t := fanout._topic(v_c.topic);
    -- The row image of s.j (to_jsonb of a transition row).
    v_img := CASE
        WHEN v_c.columns IS NOT NULL THEN
            format('(SELECT coalesce(jsonb_object_agg(e.key, e.value), ''{}'') FROM jsonb_each(s.j) e
                     WHERE e.key = ANY (%L::text[]) AND e.key <> ALL (%L::text[]))', v_c.columns, v_c.exclude_columns)
        WHEN cardinality(v_c.exclude_columns) > 0 THEN format('(s.j - %L::text[])', v_c.exclude_columns)
        ELSE 's.j' END;
    v_key := 'jsonb_build_object(' || (SELECT string_agg(format('%L, s.j -> %L', k, k), ', ')
                                       FROM unnest(v_c.key_columns) AS k) || ')';
    v_grp := CASE WHEN cardinality(v_c.key_columns) = 1 THEN format('s.j ->> %L', v_c.key_columns[1])
                  ELSE v_key || '::text' END;
    v_nokey := (SELECT string_agg(format('s.j -> %L IS NULL', k), ' OR ') FROM unnest(v_c.key_columns) AS k);
    -- The body's dollar quote: a random tag that occurs nowhere else in the
    -- function (a topic or a column may be named with any characters).
    LOOP
        v_tag := '$capture_' || substr(md5(random()::text), 1, 16) || '$';
        v_sql := format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I()
        RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, fanout, pg_temp
        AS %11$s
        DECLARE
            v_table    text := format('%%I.%%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
            v_caller   oid;
            v_set      text;
            v_ok       boolean;
            v_blocked  boolean;
            v_other    boolean := false;
            v_id       bigint;
            v_seqord   boolean;
            v_max      int;
            v_pubsub   boolean;
            v_t        fanout.topic;
            v_hlen     int;
            v_payloads jsonb[];
            v_groups   text[];
            v_headers  jsonb[];
            v_bad      boolean;
            v_nokey    boolean;
            v_i        int;
        BEGIN
            -- 1. The writer's publish grant, by fanout._may's rule for this
            --    topic (superuser or pgq's owner; else fanout_producer and a
            --    publish or admin grant whose pattern matches, held by a role
            --    the caller has the privileges of), the topic's bytes quota
            --    (fanout.quota_block) and the topic's row, in one static
            --    query on every statement: a grant revoked meanwhile refuses
            --    the next one.
            SELECT c.r,
                   pg_has_role(c.r, n.nspowner, 'USAGE')
                   OR (pg_has_role(c.r, 'fanout_producer', 'USAGE')
                       AND EXISTS (SELECT 1 FROM fanout.topic_grant g
                                   WHERE g.privilege IN ('publish', 'admin')
                                     AND CASE WHEN right(g.pattern, 1) = '%%' THEN starts_with(%2$L, left(g.pattern, -1))
                                              ELSE g.pattern = %2$L END
                                     AND pg_has_role(c.r, g.role, 'USAGE'))),
                   EXISTS (SELECT 1 FROM fanout.quota_block q WHERE q.topic_id = %8$s),
                   t.topic_id, t.sequence_ordering, t.max_payload_bytes,
                   t.semantics = 'pubsub' AND t.block_writes_without_subscriptions
            INTO v_caller, v_ok, v_blocked, v_id, v_seqord, v_max, v_pubsub
            FROM (SELECT to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                                     ELSE current_setting('role') END))::oid AS r) c
            JOIN pg_namespace n ON n.nspname = 'fanout'
            LEFT JOIN fanout.topic t ON t.topic = %2$L
            WHERE c.r IS NOT NULL;
            IF v_ok AND NOT v_blocked THEN
                -- As fanout._may notes the caller allowed in the transaction.
                IF current_setting('fanout.xact_caller', true) IS DISTINCT FROM v_caller::text THEN
                    v_set := set_config('fanout.xact_caller',
                                        CASE WHEN coalesce(current_setting('fanout.xact_caller', true), '') = ''
                                             THEN v_caller::text ELSE '0' END, true);
                END IF;
            ELSE
                -- Refused or blocked: fanout._enter raises what every
                -- publish raises (PGQ21, PGQ25), with the same messages.
                PERFORM fanout._enter(%2$L, 'publish');
            END IF;
            -- 2. The topic's table, locked as fanout._enter locks it:
            --    fanout.drop_topic takes it ACCESS EXCLUSIVE before anything
            --    else, so the topic cannot be dropped under this statement
            --    (nor before this transaction ends). Once the lock is held
            --    the topic is the one whose row was read (a drop removes row
            --    and table together; a concurrent alter_topic changes
            --    settings a statement may read either way). A table dropped
            --    before or while this waited, a topic created again under
            --    another id or sequence-ordered: the general path below
            --    (PGQ01, or the topic of that name).
            v_other := v_id IS DISTINCT FROM %8$s OR v_seqord;
            IF NOT v_other THEN
                BEGIN
                    LOCK TABLE ONLY %3$s IN ACCESS SHARE MODE;
                EXCEPTION WHEN undefined_table THEN
                    v_other := true;
                END;
            END IF;
            -- The length of a message's headers as text: the same for every
            -- op ('insert', 'update', 'delete' have six letters each).
            v_hlen := octet_length(jsonb_build_object('pgq_capture', v_table, 'op', 'update')::text);
            -- 3. The messages, and whether one of them can fail a check
            --    (size over max_payload_bytes, a key that is no valid
            --    message_group): one query per statement.
            IF TG_OP = 'TRUNCATE' THEN
                v_payloads := ARRAY[jsonb_build_object('op', 'truncate', 'table', v_table)];
                v_headers := ARRAY[jsonb_build_object('pgq_capture', v_table, 'op', 'truncate')];
                v_nokey := false;
                v_bad := octet_length(v_payloads[1]::text) + octet_length(v_headers[1]::text) > v_max;
            ELSIF TG_OP = 'INSERT' THEN
                SELECT array_agg(m.p), array_agg(m.g), bool_or(m.nokey),
                       bool_or(octet_length(m.p::text) + v_hlen + coalesce(octet_length(m.g), 0) > v_max
                               OR (m.g IS NOT NULL AND NOT (m.g ~ '^[!-~]' AND char_length(m.g) <= 512
                                                            AND m.g !~ '[[:cntrl:]]')))
                INTO v_payloads, v_groups, v_nokey, v_bad
                FROM (SELECT jsonb_build_object('op', 'insert', 'table', v_table, 'key', %5$s, 'new', %4$s) AS p,
                             %6$s AS g, %9$s AS nokey
                      FROM (SELECT to_jsonb(n) AS j FROM fanout_new n) s) m;
                v_headers := array_fill(jsonb_build_object('pgq_capture', v_table, 'op', 'insert'),
                                        ARRAY[cardinality(v_payloads)]);
            ELSIF TG_OP = 'DELETE' THEN
                SELECT array_agg(m.p), array_agg(m.g), bool_or(m.nokey),
                       bool_or(octet_length(m.p::text) + v_hlen + coalesce(octet_length(m.g), 0) > v_max
                               OR (m.g IS NOT NULL AND NOT (m.g ~ '^[!-~]' AND char_length(m.g) <= 512
                                                            AND m.g !~ '[[:cntrl:]]')))
                INTO v_payloads, v_groups, v_nokey, v_bad
                FROM (SELECT jsonb_build_object('op', 'delete', 'table', v_table, 'key', %5$s, 'old', %4$s) AS p,
                             %6$s AS g, %9$s AS nokey
                      FROM (SELECT to_jsonb(o) AS j FROM fanout_old o) s) m;
                v_headers := array_fill(jsonb_build_object('pgq_capture', v_table, 'op', 'delete'),
                                        ARRAY[cardinality(v_payloads)]);
            ELSE
                -- The transition tables hold an UPDATE's old and new rows
                -- in step (row i of each is one updated row); zipped, not
                -- joined. A pair with the same key is an update (published
                -- when a captured column changed), one whose key changed a
                -- delete of the old key and an insert of the new one;
                -- deletes first, then the rows in the order the statement
                -- wrote them.
                SELECT array_agg(m.p), array_agg(m.g),
                       array_agg(jsonb_build_object('pgq_capture', v_table, 'op', m.op)), bool_or(m.nokey),
                       bool_or(octet_length(m.p::text) + v_hlen + coalesce(octet_length(m.g), 0) > v_max
                               OR (m.g IS NOT NULL AND NOT (m.g ~ '^[!-~]' AND char_length(m.g) <= 512
                                                            AND m.g !~ '[[:cntrl:]]')))
                INTO v_payloads, v_groups, v_headers, v_nokey, v_bad
                FROM (
                    SELECT CASE v.op
                               WHEN 'update' THEN jsonb_build_object('op', 'update', 'table', v_table, 'key', nn.k,
                                                                     'new', nn.img, 'old', d.old_changed,
                                                                     'changed', to_jsonb(d.changed))
                               WHEN 'delete' THEN jsonb_build_object('op', 'delete', 'table', v_table, 'key', oo.k,
                                                                     'old', oo.img)
                               ELSE jsonb_build_object('op', 'insert', 'table', v_table, 'key', nn.k, 'new', nn.img)
                           END AS p,
                           CASE v.op WHEN 'delete' THEN oo.g ELSE nn.g END AS g, v.op, nn.nokey OR oo.nokey AS nokey
                    FROM ROWS FROM (unnest(ARRAY(SELECT to_jsonb(x) FROM fanout_old x)),
                                    unnest(ARRAY(SELECT to_jsonb(x) FROM fanout_new x))) WITH ORDINALITY AS u(oj, nj, ord)
                    CROSS JOIN LATERAL (SELECT %5$s AS k, %6$s AS g, %4$s AS img, (%9$s) AS nokey
                                        FROM (SELECT u.nj AS j) s) nn
                    CROSS JOIN LATERAL (SELECT %5$s AS k, %6$s AS g, %4$s AS img, (%9$s) AS nokey
                                        FROM (SELECT u.oj AS j) s) oo
                    CROSS JOIN LATERAL (
                        SELECT array_agg(c ORDER BY c) AS changed, jsonb_object_agg(c, oo.img -> c) AS old_changed
                        FROM jsonb_object_keys(nn.img) AS c
                        WHERE nn.k = oo.k AND nn.img -> c IS DISTINCT FROM oo.img -> c) d
                    CROSS JOIN LATERAL (VALUES (false, 'delete'), (true, 'insert'), (true, 'update')) AS v(phase, op)
                    WHERE CASE v.op WHEN 'update' THEN d.changed IS NOT NULL ELSE nn.k IS DISTINCT FROM oo.k END
                    -- One sort for the arrays: aggregates over a sorted
                    -- subquery take its order.
                    ORDER BY v.phase, u.ord) m;
            END IF;
            IF v_payloads IS NULL THEN
                RETURN NULL;
            END IF;
            IF v_nokey THEN
                RAISE EXCEPTION 'table %% has no column %% of its captured primary key any more', v_table, %10$L
                    USING ERRCODE = 'PGQ03',
                          HINT = format('the table''s owner calls fanout.capture_table(%%L, %%L) again', v_table, %2$L);
            END IF;
            IF v_other THEN
                -- Dropped (PGQ01), created again under another id, or made
                -- sequence-ordered: fanout.publish_batch raises what
                -- publish raises, or publishes.
                PERFORM fanout.publish_batch(%2$L, v_payloads, v_headers, v_groups);
                RETURN NULL;
            END IF;
            -- 4. Only what can fail is checked by fanout._check_message (as
            --    fanout.publish_batch does): it names the element and raises
            --    PGQ05/PGQ04; a pubsub topic that blocks writes without
            --    subscriptions is checked once (PGQ07).
            IF v_bad THEN
                v_t := fanout._topic(%2$L::text);
                FOR v_i IN 1 .. cardinality(v_payloads) LOOP
                    PERFORM fanout._check_message(v_t, v_payloads[v_i], v_headers[v_i], v_groups[v_i], v_i);
                END LOOP;
            ELSIF v_pubsub THEN
                v_t := fanout._topic(%2$L::text);
                PERFORM fanout._check_message(v_t, v_payloads[1], v_headers[1], v_groups[1], 1);
            END IF;
            -- 5. The topic's insert function, as publish_batch inserts.
            PERFORM %7$s(v_payloads, v_headers, v_groups);
            RETURN NULL;
        END
        %11$s$ddl$,
        v_fn, v_t.topic, format('fanout_data.%I', v_t.data_table), v_img, v_key, v_grp,
        format('fanout_data.%I', v_t.data_table || '_insert_batch'), v_t.topic_id, v_nokey,
        array_to_string(v_c.key_columns, ', '), v_tag);
        EXIT WHEN length(v_sql) - length(replace(v_sql, v_tag, '')) = 2 * length(v_tag);
    END LOOP;
    EXECUTE v_sql;
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I() FROM PUBLIC', v_fn);
    RETURN format('fanout_data.%I()', v_fn)::regprocedure;
END
$fn$;
