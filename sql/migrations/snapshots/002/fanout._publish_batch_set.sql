-- fanout._publish_batch_set(p_t, p_payloads, p_headers, p_groups, p_keys,
-- p_deliver_at, p_priority): publish_batch with dedupe keys, a delivery time
-- or a priority (no sequences), set-based: one call of the topic's generated
-- fanout_data.m<id>_insert_keyed takes the ids in input order, claims the
-- batch's distinct keys in fanout.dedupe in one statement (in key order, so
-- two batches sharing keys wait for each other instead of deadlocking) and
-- inserts the messages whose key was claimed (or that have none); its plans
-- are cached per session. Semantics as fanout._publish_one: a key published
-- within the topic's dedupe_window returns that message's id and inserts
-- nothing; a concurrent publisher of a key waits for the first transaction;
-- a key repeated in the batch gets the id of its first element.
-- The caller checked every element. Returns the ids in input order (an
-- array: one set fewer to materialize).
-- Raises PGQ03 (empty or over-long dedupe key).
-- Tables: fanout.dedupe, fanout.topic (prioritized), fanout_data.m<topic_id> (and its kpart
-- on a partitioned topic).
CREATE OR REPLACE FUNCTION fanout._publish_batch_set(
    p_t fanout.topic, p_payloads jsonb[], p_headers jsonb[], p_groups text[], p_keys text[],
    p_deliver_at timestamptz, p_priority int)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_keys IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_keys) AS k WHERE k = '' OR length(k) > 512) THEN
        RAISE EXCEPTION 'dedupe_key must have 1 to 512 characters, got %',
            (SELECT length(k) FROM unnest(p_keys) AS k WHERE k = '' OR length(k) > 512 LIMIT 1)
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_priority > 0 AND NOT p_t.prioritized THEN
        UPDATE fanout.topic t SET prioritized = true WHERE t.topic_id = p_t.topic_id AND NOT t.prioritized;
    END IF;
    -- The xid before the ids (partition rotation relies on it).
    PERFORM pg_current_xact_id();
    EXECUTE format('SELECT fanout_data.%I($1, $2, $3, $4, $5, $6, $7)', p_t.data_table || '_insert_keyed')
        INTO v_ids USING p_payloads, p_headers, p_groups, p_keys, p_deliver_at, nullif(p_priority, 0)::smallint,
                         p_t.dedupe_window;
    -- Keys not claimed by their element (published before, by a concurrent
    -- transaction the claim waited for, or by an earlier element of the
    -- batch): their ids, in a new statement that sees the claim.
    IF p_keys IS NOT NULL AND array_position(v_ids, NULL) IS NOT NULL THEN
        SELECT array_agg(coalesce(x.id, d.message_id) ORDER BY x.ord) INTO v_ids
        FROM unnest(v_ids, p_keys) WITH ORDINALITY AS x(id, k, ord)
        LEFT JOIN fanout.dedupe d ON x.id IS NULL AND d.topic_id = p_t.topic_id AND d.dedupe_key = x.k;
    END IF;
    RETURN v_ids;
END
$fn$;
