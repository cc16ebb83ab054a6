-- fanout._publish_batch_set(p_t, p_payloads, p_headers, p_groups, p_keys,
-- p_deliver_at, p_priority): publish_batch with dedupe keys, a delivery time
-- or a priority (no sequences), set-based: ids are taken in input order, the
-- batch's distinct keys are claimed in fanout.dedupe in one statement (in
-- key order, so two batches sharing keys wait for each other instead of
-- deadlocking), and the messages whose key was claimed (or that have none)
-- are inserted in one statement. Semantics as fanout._publish_one: a key
-- published within the topic's dedupe_window returns that message's id and
-- inserts nothing; a concurrent publisher of a key waits for the first
-- transaction; a key repeated in the batch gets the id of its first element.
-- The caller checked every element. Returns the ids in input order.
-- Tables: fanout.dedupe, fanout.topic (prioritized), fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._publish_batch_set(
    p_t fanout.topic, p_payloads jsonb[], p_headers jsonb[], p_groups text[], p_keys text[],
    p_deliver_at timestamptz, p_priority int)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n     int := cardinality(p_payloads);
    v_ids   bigint[];
    v_final bigint[];
    v_new   boolean[];
    v_look  boolean[];
BEGIN
    IF p_keys IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_keys) AS k WHERE k = '' OR length(k) > 512) THEN
        RAISE EXCEPTION 'dedupe_key must have 1 to 512 characters, got %',
            (SELECT length(k) FROM unnest(p_keys) AS k WHERE k = '' OR length(k) > 512 LIMIT 1)
            USING ERRCODE = 'PGQ03';
    END IF;
    -- The xid before the ids (partition rotation relies on it).
    PERFORM pg_current_xact_id();
    v_ids := ARRAY(SELECT nextval(format('fanout_data.%I', p_t.seq_name)::regclass)
                   FROM generate_series(1, v_n) ORDER BY 1);
    IF p_keys IS NULL THEN
        v_final := v_ids;
        v_new := array_fill(true, ARRAY[v_n]);
    ELSE
        -- Claim the keys (the first element of each); look up only the keys
        -- that were not claimed (published before, or by a concurrent batch).
        WITH claimed AS (
            INSERT INTO fanout.dedupe AS d (topic_id, dedupe_key, message_id, created_at)
            SELECT p_t.topic_id, f.k, f.id, clock_timestamp()
            FROM (SELECT DISTINCT ON (u.k) u.k, v_ids[u.ord] AS id
                  FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord)
                  WHERE u.k IS NOT NULL
                  ORDER BY u.k, u.ord) f
            ORDER BY f.k
            ON CONFLICT (topic_id, dedupe_key) DO UPDATE
            SET message_id = excluded.message_id, created_at = excluded.created_at
            WHERE d.created_at < clock_timestamp() - p_t.dedupe_window
            RETURNING d.dedupe_key, d.message_id)
        SELECT array_agg(coalesce(c.message_id, v_ids[u.ord]) ORDER BY u.ord),
               array_agg(u.k IS NULL OR coalesce(c.message_id = v_ids[u.ord], false) ORDER BY u.ord),
               array_agg(u.k IS NOT NULL AND c.message_id IS NULL ORDER BY u.ord)
        INTO v_final, v_new, v_look
        FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord)
        LEFT JOIN claimed c ON c.dedupe_key = u.k;
        -- Keys not claimed here: their ids (a new statement, so it sees the
        -- transaction the claim waited for).
        IF true = ANY (v_look) THEN
            SELECT array_agg(CASE WHEN x.look THEN d.message_id ELSE x.f END ORDER BY x.ord)
            INTO v_final
            FROM unnest(p_keys, v_final, v_look) WITH ORDINALITY AS x(k, f, look, ord)
            LEFT JOIN fanout.dedupe d ON x.look AND d.topic_id = p_t.topic_id AND d.dedupe_key = x.k;
        END IF;
    END IF;
    IF p_priority > 0 AND NOT p_t.prioritized THEN
        UPDATE fanout.topic t SET prioritized = true WHERE t.topic_id = p_t.topic_id AND NOT t.prioritized;
    END IF;
    EXECUTE format(
        'INSERT INTO fanout_data.%I (id, headers, message_group, payload, deliver_at, priority)
         SELECT u.id, coalesce(u.h, ''{}''::jsonb), u.g, u.p, $5, $6
         FROM unnest($1::bigint[], $2::jsonb[], $3::jsonb[], $4::text[], $7::boolean[]) WITH ORDINALITY
              AS u(id, p, h, g, fresh, ord)
         WHERE u.fresh
         ORDER BY u.ord', p_t.data_table)
        USING v_final, p_payloads, coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[v_n])),
              coalesce(p_groups, array_fill(NULL::text, ARRAY[v_n])), p_deliver_at,
              nullif(p_priority, 0)::smallint, v_new;
    RETURN QUERY SELECT x FROM unnest(v_final) AS x;
END
$fn$;
