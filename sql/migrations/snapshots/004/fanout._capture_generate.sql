-- fanout._capture_generate(p_capture_id): (re)creates the capture's trigger
-- function fanout_data.capture_<id>() (fanout.capture_table's four
-- statement-level AFTER triggers run it) from the capture's row: the table's
-- name, the topic's id, the key columns, columns and
-- exclude_columns are compiled in, so each statement runs static SQL whose
-- plans the session keeps (the generic trigger planned a FULL JOIN of every
-- statement's rows and published through fanout.publish_batch's checks and
-- dynamic SQL: 0.7 ms a single-row statement). The generated function:
--   * enters the topic as every publish does (fanout._enter: the writer's
--     publish grant, PGQ21; the bytes quota, PGQ25; ACCESS SHARE on the
--     topic's table), so neither a capture nor a forged trigger lets a
--     writer publish where it may not, and the topic cannot be dropped
--     under the statement;
--   * builds the messages set-based from the transition tables (shape:
--     docs/capture.md; insert and delete straight from one side, update
--     zips old and new rows, which the transition tables hold in step: a
--     key change is a delete and an insert, an update of no captured
--     column publishes nothing);
--   * checks size and message_group only where they can fail
--     (fanout._check_message raises PGQ05/PGQ03 naming the element), and a
--     pubsub topic's block_writes_without_subscriptions (PGQ07);
--   * inserts through the topic's fanout_data.m<id>_insert_batch (static
--     call). When the topic was dropped (PGQ01), re-created under another
--     id, or is sequence-ordered, it goes through fanout.publish_batch
--     instead, which raises what publish raises.
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
        AS %12$s
        DECLARE
            v_table    text := format('%%I.%%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
            v_t        fanout.topic;
            v_payloads jsonb[];
            v_groups   text[];
            v_headers  jsonb[];
            v_bad      boolean;
            v_nokey    boolean;
            v_i        int;
        BEGIN
            -- The writer's publish grant, the bytes quota, and the topic's
            -- table locked against a concurrent drop, as every publish.
            PERFORM fanout._enter(%2$L, 'publish');
            SELECT * INTO v_t FROM fanout.topic t WHERE t.topic = %2$L;
            IF TG_OP = 'TRUNCATE' THEN
                v_payloads := ARRAY[jsonb_build_object('op', 'truncate', 'table', v_table)];
                v_headers := ARRAY[jsonb_build_object('pgq_capture', v_table, 'op', 'truncate')];
            ELSIF TG_OP = 'INSERT' THEN
                SELECT array_agg(jsonb_build_object('op', 'insert', 'table', v_table, 'key', %5$s, 'new', %4$s)),
                       array_agg(%6$s), bool_or(%10$s)
                INTO v_payloads, v_groups, v_nokey
                FROM (SELECT to_jsonb(n) AS j FROM fanout_new n) s;
                v_headers := array_fill(jsonb_build_object('pgq_capture', v_table, 'op', 'insert'),
                                        ARRAY[cardinality(v_payloads)]);
            ELSIF TG_OP = 'DELETE' THEN
                SELECT array_agg(jsonb_build_object('op', 'delete', 'table', v_table, 'key', %5$s, 'old', %4$s)),
                       array_agg(%6$s), bool_or(%10$s)
                INTO v_payloads, v_groups, v_nokey
                FROM (SELECT to_jsonb(o) AS j FROM fanout_old o) s;
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
                       array_agg(jsonb_build_object('pgq_capture', v_table, 'op', m.op)), bool_or(m.nokey)
                INTO v_payloads, v_groups, v_headers, v_nokey
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
                    CROSS JOIN LATERAL (SELECT %5$s AS k, %6$s AS g, %4$s AS img, (%10$s) AS nokey
                                        FROM (SELECT u.nj AS j) s) nn
                    CROSS JOIN LATERAL (SELECT %5$s AS k, %6$s AS g, %4$s AS img, (%10$s) AS nokey
                                        FROM (SELECT u.oj AS j) s) oo
                    CROSS JOIN LATERAL (
                        SELECT array_agg(c ORDER BY c) AS changed, jsonb_object_agg(c, oo.img -> c) AS old_changed
                        FROM jsonb_object_keys(nn.img) AS c
                        WHERE nn.k = oo.k AND nn.img -> c IS DISTINCT FROM oo.img -> c) d
                    CROSS JOIN LATERAL (VALUES (false, 'delete'), (true, 'insert'), (true, 'update')) AS v(phase, op)
                    WHERE CASE v.op WHEN 'update' THEN d.changed IS NOT NULL ELSE nn.k IS DISTINCT FROM oo.k END
                    -- One sort for the three arrays: aggregates over a
                    -- sorted subquery take its order.
                    ORDER BY v.phase, u.ord) m;
            END IF;
            IF v_payloads IS NULL THEN
                RETURN NULL;
            END IF;
            IF v_nokey THEN
                RAISE EXCEPTION 'table %% has no column %% of its captured primary key any more', v_table, %11$L
                    USING ERRCODE = 'PGQ03',
                          HINT = format('the table''s owner calls fanout.capture_table(%%L, %%L) again', v_table, %2$L);
            END IF;
            IF v_t.topic_id IS DISTINCT FROM %8$s OR v_t.sequence_ordering THEN
                PERFORM fanout.publish_batch(%2$L, v_payloads, v_headers, v_groups);
                RETURN NULL;
            END IF;
            -- Only what can fail is checked by fanout._check_message (as
            -- fanout.publish_batch does): a message over the topic's size, a
            -- key that is no valid message_group, and (once) a pubsub topic
            -- that blocks writes without subscriptions.
            SELECT bool_or(octet_length(u.p::text) + octet_length(u.h::text) + coalesce(octet_length(u.g), 0)
                               > v_t.max_payload_bytes
                           OR (u.g IS NOT NULL AND NOT (u.g ~ '^[!-~]' AND char_length(u.g) <= 512
                                                        AND u.g !~ '[[:cntrl:]]')))
            INTO v_bad
            FROM unnest(v_payloads, v_headers, v_groups) AS u(p, h, g);
            IF v_bad THEN
                FOR v_i IN 1 .. cardinality(v_payloads) LOOP
                    PERFORM fanout._check_message(v_t, v_payloads[v_i], v_headers[v_i], v_groups[v_i], v_i);
                END LOOP;
            ELSIF v_t.semantics = 'pubsub' AND v_t.block_writes_without_subscriptions THEN
                PERFORM fanout._check_message(v_t, v_payloads[1], v_headers[1], v_groups[1], 1);
            END IF;
            PERFORM fanout_data.%9$I(v_payloads, v_headers, v_groups);
            RETURN NULL;
        END
        %12$s$ddl$,
        v_fn, v_t.topic, NULL, v_img, v_key, v_grp, NULL, v_t.topic_id,
        v_t.data_table || '_insert_batch', v_nokey, array_to_string(v_c.key_columns, ', '), v_tag);
        EXIT WHEN length(v_sql) - length(replace(v_sql, v_tag, '')) = 2 * length(v_tag);
    END LOOP;
    EXECUTE v_sql;
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I() FROM PUBLIC', v_fn);
    RETURN format('fanout_data.%I()', v_fn)::regprocedure;
END
$fn$;
