-- fanout._capture_trigger(): the statement-level AFTER trigger of a captured
-- table (fanout.capture_table): publishes the statement's changes to the
-- capture's topic in the writer's own transaction (and subtransaction: a
-- rolled-back savepoint takes its messages with it), one message per row,
-- in one fanout.publish_batch call per statement. Rows come from the
-- statement's transition tables (fanout_new, fanout_old).
--   payload: {"op": "insert" | "update" | "delete" | "truncate",
--             "table": "schema.table", "key": {primary key},
--             "new": {row image} (insert, update),
--             "old": {row image} (delete), or for an update only the old
--                    values of the changed columns, named in "changed"}
--   headers: {"pgq_capture": "schema.table", "op": ...}
--   message_group: the primary key (its value when it has one column, else
--                  the key object as text), so a key-partitioned topic keeps
--                  each row's changes in order.
-- An update that changes the primary key is a delete and an insert; one
-- that changes no captured column publishes nothing. The writer publishes
-- under its own grant (fanout.publish_batch checks it: PGQ21 fails the
-- statement), so neither a forged trigger nor a capture lets anyone publish
-- where they may not. TG_ARGV[0] names the capture (fanout.capture).
-- Raises: PGQ01 (topic gone), PGQ21, and what publish_batch raises.
-- Tables: fanout.capture, and what fanout.publish_batch writes.
CREATE OR REPLACE FUNCTION fanout._capture_trigger()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_c        fanout.capture;
    v_table    text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    v_new      jsonb[];
    v_old      jsonb[];
    v_payloads jsonb[];
    v_groups   text[];
    v_headers  jsonb[];
BEGIN
    SELECT * INTO v_c FROM fanout.capture c WHERE c.capture_id = TG_ARGV[0]::bigint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has a capture trigger for capture %, which does not exist', v_table, TG_ARGV[0]
            USING ERRCODE = 'PGQ03', HINT = 'run fanout.uncapture_table() on it, then fanout.capture_table()';
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM fanout.publish_batch(v_c.topic, ARRAY[jsonb_build_object('op', 'truncate', 'table', v_table)],
                                     ARRAY[jsonb_build_object('pgq_capture', v_table, 'op', 'truncate')]);
        RETURN NULL;
    END IF;
    -- The statement's rows (a transition table exists only for the
    -- operations that have it).
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT array_agg(to_jsonb(n)) INTO v_new FROM fanout_new n;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT array_agg(to_jsonb(o)) INTO v_old FROM fanout_old o;
    END IF;
    -- Old and new rows paired by primary key: a new row alone is an insert
    -- (also after a key change), an old one alone a delete, a pair an
    -- update; deletes first, then the rows in the order the statement wrote
    -- them. Row images and keys inline: a SQL function per row was planned
    -- on every call (1 ms a row).
    WITH side AS (
        SELECT s.is_new, s.ord,
               CASE WHEN v_c.columns IS NULL THEN s.j - v_c.exclude_columns
                    ELSE (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') FROM jsonb_each(s.j) e
                          WHERE e.key = ANY (v_c.columns) AND e.key <> ALL (v_c.exclude_columns)) END AS img,
               CASE WHEN cardinality(v_c.key_columns) = 1
                    THEN jsonb_build_object(v_c.key_columns[1], s.j -> v_c.key_columns[1])
                    ELSE (SELECT jsonb_object_agg(kc, s.j -> kc) FROM unnest(v_c.key_columns) AS kc) END AS k
        FROM (SELECT true AS is_new, u.ord, u.j FROM unnest(v_new) WITH ORDINALITY AS u(j, ord)
              UNION ALL
              SELECT false, u.ord, u.j FROM unnest(v_old) WITH ORDINALITY AS u(j, ord)) s),
    pair AS (
        SELECT coalesce(n.k, o.k) AS k, n.img AS new_img, o.img AS old_img,
               n.k IS NOT NULL AS phase, coalesce(n.ord, o.ord) AS ord,
               ARRAY(SELECT e.key FROM jsonb_each(n.img) e
                     WHERE o.img IS NOT NULL AND e.value IS DISTINCT FROM o.img -> e.key ORDER BY e.key) AS changed
        FROM (SELECT * FROM side WHERE is_new) n FULL JOIN (SELECT * FROM side WHERE NOT is_new) o ON o.k = n.k),
    msg AS (
        SELECT p.phase, p.ord,
               CASE WHEN cardinality(v_c.key_columns) = 1 THEN p.k ->> v_c.key_columns[1] ELSE p.k::text END AS grp,
               CASE WHEN p.old_img IS NULL THEN 'insert' WHEN p.new_img IS NULL THEN 'delete' ELSE 'update' END AS op,
               p.k, p.new_img, p.old_img, p.changed
        FROM pair p
        WHERE p.old_img IS NULL OR p.new_img IS NULL OR cardinality(p.changed) > 0)
    SELECT array_agg(CASE m.op
                         WHEN 'insert' THEN jsonb_build_object('op', m.op, 'table', v_table, 'key', m.k, 'new', m.new_img)
                         WHEN 'delete' THEN jsonb_build_object('op', m.op, 'table', v_table, 'key', m.k, 'old', m.old_img)
                         ELSE jsonb_build_object('op', m.op, 'table', v_table, 'key', m.k, 'new', m.new_img,
                                                 'old', (SELECT coalesce(jsonb_object_agg(c, m.old_img -> c), '{}')
                                                         FROM unnest(m.changed) AS c),
                                                 'changed', to_jsonb(m.changed)) END
                     ORDER BY m.phase, m.ord),
           array_agg(m.grp ORDER BY m.phase, m.ord),
           array_agg(jsonb_build_object('pgq_capture', v_table, 'op', m.op) ORDER BY m.phase, m.ord)
    INTO v_payloads, v_groups, v_headers
    FROM msg m;
    IF v_payloads IS NOT NULL THEN
        PERFORM fanout.publish_batch(v_c.topic, v_payloads, v_headers, v_groups);
    END IF;
    RETURN NULL;
END
$fn$;
