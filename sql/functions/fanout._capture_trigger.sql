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
    v_op       text := lower(TG_OP);
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
        PERFORM fanout.publish_batch(v_c.topic, ARRAY[jsonb_build_object('op', v_op, 'table', v_table)],
                                     ARRAY[jsonb_build_object('pgq_capture', v_table, 'op', v_op)]);
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(jsonb_build_object('op', v_op, 'table', v_table, 'key', x.k,
                                            'new', fanout._capture_image(x.j, v_c.columns, v_c.exclude_columns))
                         ORDER BY x.ord),
               array_agg(CASE WHEN cardinality(v_c.key_columns) = 1 THEN x.k ->> v_c.key_columns[1]
                              ELSE x.k::text END ORDER BY x.ord)
        INTO v_payloads, v_groups
        FROM (SELECT r.ord, r.j, fanout._capture_key(r.j, v_c.key_columns) AS k
              FROM (SELECT row_number() OVER () AS ord, to_jsonb(n) AS j FROM fanout_new n) r) x;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(jsonb_build_object('op', v_op, 'table', v_table, 'key', x.k,
                                            'old', fanout._capture_image(x.j, v_c.columns, v_c.exclude_columns))
                         ORDER BY x.ord),
               array_agg(CASE WHEN cardinality(v_c.key_columns) = 1 THEN x.k ->> v_c.key_columns[1]
                              ELSE x.k::text END ORDER BY x.ord)
        INTO v_payloads, v_groups
        FROM (SELECT r.ord, r.j, fanout._capture_key(r.j, v_c.key_columns) AS k
              FROM (SELECT row_number() OVER () AS ord, to_jsonb(o) AS j FROM fanout_old o) r) x;
    ELSE
        -- Old and new rows paired by primary key: an unpaired old row was
        -- deleted (its key changed), an unpaired new one inserted; deletes
        -- first, then the statement's rows in the order it wrote them.
        WITH n AS (SELECT r.ord, fanout._capture_image(r.j, v_c.columns, v_c.exclude_columns) AS img,
                          fanout._capture_key(r.j, v_c.key_columns) AS k
                   FROM (SELECT row_number() OVER () AS ord, to_jsonb(x) AS j FROM fanout_new x) r),
             o AS (SELECT r.ord, fanout._capture_image(r.j, v_c.columns, v_c.exclude_columns) AS img,
                          fanout._capture_key(r.j, v_c.key_columns) AS k
                   FROM (SELECT row_number() OVER () AS ord, to_jsonb(x) AS j FROM fanout_old x) r),
             pair AS (SELECT coalesce(n.k, o.k) AS k, n.img AS new_img, o.img AS old_img,
                             CASE WHEN n.k IS NULL THEN 0 ELSE 1 END AS phase, coalesce(n.ord, o.ord) AS ord,
                             ARRAY(SELECT e.key FROM jsonb_each(n.img) e
                                   WHERE e.value IS DISTINCT FROM o.img -> e.key ORDER BY e.key) AS changed
                      FROM n FULL JOIN o ON o.k = n.k)
        SELECT array_agg(CASE WHEN p.old_img IS NULL
                              THEN jsonb_build_object('op', 'insert', 'table', v_table, 'key', p.k, 'new', p.new_img)
                              WHEN p.new_img IS NULL
                              THEN jsonb_build_object('op', 'delete', 'table', v_table, 'key', p.k, 'old', p.old_img)
                              ELSE jsonb_build_object('op', 'update', 'table', v_table, 'key', p.k, 'new', p.new_img,
                                                      'old', (SELECT coalesce(jsonb_object_agg(c, p.old_img -> c), '{}')
                                                              FROM unnest(p.changed) AS c),
                                                      'changed', to_jsonb(p.changed)) END
                         ORDER BY p.phase, p.ord),
               array_agg(CASE WHEN cardinality(v_c.key_columns) = 1 THEN p.k ->> v_c.key_columns[1]
                              ELSE p.k::text END ORDER BY p.phase, p.ord)
        INTO v_payloads, v_groups
        FROM pair p
        WHERE p.old_img IS NULL OR p.new_img IS NULL OR cardinality(p.changed) > 0;
    END IF;
    IF v_payloads IS NOT NULL THEN
        SELECT array_agg(jsonb_build_object('pgq_capture', v_table, 'op', x.p ->> 'op') ORDER BY x.ord)
        INTO v_headers
        FROM unnest(v_payloads) WITH ORDINALITY AS x(p, ord);
        PERFORM fanout.publish_batch(v_c.topic, v_payloads, v_headers, v_groups);
    END IF;
    RETURN NULL;
END
$fn$;
