-- fanout.capture_table(table_name, topic, columns, exclude_columns, shape,
-- claim_check_rows): publishes every change of a table to a topic, in the
-- writing transaction: INSERT, UPDATE, DELETE and TRUNCATE, one message per
-- row (shape 'row', the default) or one per statement (shape 'statement':
-- the rows inline up to claim_check_rows per side, default 100, 0..10000,
-- else a claim-check read with fanout.capture_rows; docs/capture.md),
-- through four statement-level AFTER triggers
-- (fanout_capture_ins/_upd/_del/_trunc) running the capture's generated
-- function fanout_data.capture_<id>() (fanout._capture_install). columns (NULL: all) and
-- exclude_columns limit the row images; the table needs a primary key (the
-- messages' key and message_group). Only the table's owner (or a member of
-- its role) may capture it, and only into a topic it may publish to; every
-- role that writes the table must be allowed to publish to the topic too
-- (fanout_producer and a grant), or its writes fail with PGQ21. Calling it
-- again for the same topic updates columns, exclude_columns, the shape and the key
-- (after an ALTER TABLE of the primary key); columns added to the table
-- later are captured when columns is NULL, dropped ones no longer appear.
-- Returns the capture's id.
-- Raises: PGQ01 (no such topic), PGQ03 (NULL arguments, a table that is not
-- an ordinary or partitioned table, has no primary key, or is captured into
-- another topic; an unknown column; a sequence-ordered topic; a shape
-- other than 'row' and 'statement'; claim_check_rows out of 0..10000), PGQ21 (not the table's owner, or no
-- publish grant on the topic). The triggers are created by pgq's owner (the
-- role that installed it): it needs the TRIGGER privilege on the table
-- unless it is a superuser.
-- Tables: fanout.capture, fanout.event_log, pg_trigger (CREATE TRIGGER), a
-- function in fanout_data.
CREATE OR REPLACE FUNCTION fanout.capture_table(
    table_name      regclass,
    topic           text,
    columns         text[] DEFAULT NULL,
    exclude_columns text[] DEFAULT NULL,
    shape           text DEFAULT 'row',
    claim_check_rows int DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t       fanout.topic;
    v_rel     pg_class;
    v_keys    text[];
    v_bad     text[];
    v_id      bigint;
    v_topic   text;
    v_exclude text[] := coalesce($4, '{}');
    v_cc      int;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'table_name must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    -- The grant before the look-up (as every entry point): a caller without
    -- one must not learn whether the topic exists (PGQ01, PGQ26 on a shard).
    PERFORM fanout._authorize($2, 'publish');
    v_t := fanout._topic($2);
    PERFORM fanout._capture_check_owner($1, 'capture');
    IF v_t.sequence_ordering THEN
        RAISE EXCEPTION 'topic % is sequence-ordered: captured changes have no sequence numbers', quote_literal(v_t.topic)
            USING ERRCODE = 'PGQ03', HINT = 'capture into a topic without sequence_ordering';
    END IF;
    SELECT * INTO STRICT v_rel FROM pg_class c WHERE c.oid = $1;
    IF v_rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'only ordinary and partitioned tables can be captured; % is not one', $1
            USING ERRCODE = 'PGQ03';
    END IF;
    SELECT array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)) INTO v_keys
    FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])
    WHERE i.indrelid = $1 AND i.indisprimary;
    IF v_keys IS NULL THEN
        RAISE EXCEPTION 'table % has no primary key', $1
            USING ERRCODE = 'PGQ03', HINT = 'captured changes are keyed by the primary key: add one';
    END IF;
    IF $5 IS NULL OR $5 NOT IN ('row', 'statement') THEN
        RAISE EXCEPTION 'shape must be ''row'' or ''statement'', not %', coalesce(quote_literal($5), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $6 IS NOT NULL AND $5 = 'row' THEN
        RAISE EXCEPTION 'claim_check_rows applies to shape ''statement'' only' USING ERRCODE = 'PGQ03';
    END IF;
    IF $6 NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'claim_check_rows must be in 0..10000, not %', $6 USING ERRCODE = 'PGQ03';
    END IF;
    v_cc := CASE WHEN $5 = 'statement' THEN coalesce($6, 100) END;
    IF array_position($3, NULL) IS NOT NULL OR array_position(v_exclude, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'columns and exclude_columns must not contain NULL' USING ERRCODE = 'PGQ03';
    END IF;
    v_bad := ARRAY(SELECT c FROM unnest(coalesce($3, '{}') || v_exclude) AS c
                   WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                                     WHERE a.attrelid = $1 AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped));
    IF cardinality(v_bad) > 0 THEN
        RAISE EXCEPTION 'table % has no column(s) %', $1, array_to_string(ARRAY(SELECT quote_ident(b) FROM unnest(v_bad) b), ', ')
            USING ERRCODE = 'PGQ03';
    END IF;
    -- Captured already: the capture its triggers name.
    SELECT c.capture_id, c.topic INTO v_id, v_topic
    FROM pg_trigger tg JOIN fanout.capture c
      ON c.capture_id::text = split_part(encode(tg.tgargs, 'escape'), '\000', 1)
    WHERE tg.tgrelid = $1 AND tg.tgname = 'fanout_capture_ins';
    IF v_id IS NOT NULL AND v_topic <> v_t.topic THEN
        RAISE EXCEPTION 'table % is captured into topic % already', $1, quote_literal(v_topic)
            USING ERRCODE = 'PGQ03', HINT = 'fanout.uncapture_table() first';
    END IF;
    IF v_id IS NOT NULL THEN
        UPDATE fanout.capture c SET key_columns = v_keys, columns = $3, exclude_columns = v_exclude,
                                    shape = $5, claim_check_rows = v_cc
        WHERE c.capture_id = v_id;
        PERFORM fanout._capture_install(v_id, $1);
        RETURN v_id;
    END IF;
    INSERT INTO fanout.capture (topic, key_columns, columns, exclude_columns, shape, claim_check_rows, created_by)
    VALUES (v_t.topic, v_keys, $3, v_exclude, $5, v_cc, coalesce((SELECT r.rolname::text FROM pg_roles r WHERE r.oid = fanout._caller()), ''))
    RETURNING capture_id INTO v_id;
    PERFORM fanout._capture_install(v_id, $1);
    INSERT INTO fanout.event_log (topic, kind, detail)
    VALUES (v_t.topic, 'capture', jsonb_build_object('table', $1::text, 'capture_id', v_id));
    RETURN v_id;
END
$fn$;
