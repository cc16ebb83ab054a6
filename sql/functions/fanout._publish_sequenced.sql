-- fanout._publish_sequenced(p_t, p_payloads, p_headers, p_groups, p_keys,
-- p_seqs): fanout.publish_batch on a sequence-ordered topic (the caller
-- checked every element: each has a message_group and a sequence, none a
-- priority or a delivery time). Claims in a fixed order, so that two
-- batches sharing keys or sequences wait for each other instead of
-- deadlocking (40P01), whatever order their elements come in:
--   1. the dedupe keys, each distinct key once (its first element), in key
--      order, in the topic's m<id>_dedupe (INSERT ... ON CONFLICT, a row past the
--      window taken over), as fanout._publish_one does for one key;
--   2. then the (message_group, sequence) of every element that claimed
--      its key or has none, each pair once (its first element), in that
--      order, in fanout.seq_published (ON CONFLICT DO NOTHING);
--   3. a key whose element found its sequence taken (published before, or
--      earlier in the batch) is pointed at that sequence's message;
--   4. the messages that claimed their sequence are inserted, with the ids
--      taken in input order before any claim.
-- A single publish claims its key, then its sequence: the same order.
-- Every other element gets the id its sequence or its key has, looked up in
-- a new statement (which sees a concurrent claim that the claim waited for).
-- Returns the ids in input order. Raises PGQ03 (empty or over-long dedupe
-- key; nothing written). Under REPEATABLE READ, waiting for a concurrent
-- claim ends in 40001 (as in fanout._publish_one).
-- Tables: fanout_data.m<topic_id>_dedupe, fanout.seq_published,
-- fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._publish_sequenced(
    p_t fanout.topic, p_payloads jsonb[], p_headers jsonb[], p_groups text[], p_keys text[], p_seqs bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_idseq regclass := format('fanout_data.%I', p_t.seq_name)::regclass;
    v_ids   bigint[];   -- each element's own id, in input order
    v_keys  bigint[];   -- the ids of the elements that claimed their key
    v_seqs  bigint[];   -- the ids of the elements that claimed their sequence
    v_bad   bigint;
BEGIN
    SELECT min(u.ord) INTO v_bad FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord)
    WHERE u.k = '' OR octet_length(u.k) > 512 AND length(u.k) > 512;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'dedupe_key must have 1 to 512 characters, got %',
            (SELECT length(u.k) FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord) WHERE u.ord = v_bad)
            USING ERRCODE = 'PGQ03';
    END IF;
    -- The xid before the ids (partition rotation relies on it).
    PERFORM pg_current_xact_id();
    SELECT array_agg(nextval(v_idseq) ORDER BY u.ord) INTO v_ids
    FROM unnest(p_payloads) WITH ORDINALITY AS u(p, ord);

    IF p_keys IS NOT NULL THEN
        EXECUTE format($q$
            WITH claimed AS (
                INSERT INTO fanout_data.%I AS d (dedupe_key, message_id, created_at)
                SELECT f.k, f.id, clock_timestamp()
                FROM (SELECT DISTINCT ON (u.k) u.k, u.id
                      FROM unnest($1, $2) WITH ORDINALITY AS u(k, id, ord)
                      WHERE u.k IS NOT NULL ORDER BY u.k, u.ord) f
                ORDER BY f.k
                ON CONFLICT (dedupe_key) DO UPDATE
                SET message_id = excluded.message_id, created_at = excluded.created_at, claim_txid = excluded.claim_txid
                WHERE d.created_at < clock_timestamp() - $3
                  AND fanout._claim_committed_before(d.claim_txid, pg_current_snapshot())
                RETURNING d.message_id)
            SELECT coalesce(array_agg(c.message_id), '{}') FROM claimed c$q$, p_t.data_table || '_dedupe')
            INTO v_keys USING p_keys, v_ids, p_t.dedupe_window;
    END IF;

    WITH claimed AS (
        INSERT INTO fanout.seq_published AS s (topic_id, message_group, seq, message_id, created_at)
        SELECT p_t.topic_id, f.g, f.s, f.id, clock_timestamp()
        FROM (SELECT DISTINCT ON (u.g, u.s) u.g, u.s, u.id
              FROM unnest(p_groups, p_seqs, v_ids, p_keys) WITH ORDINALITY AS u(g, s, id, k, ord)
              WHERE u.ord <= cardinality(v_ids) AND (u.k IS NULL OR u.id IN (SELECT unnest(v_keys)))
              ORDER BY u.g, u.s, u.ord) f
        ORDER BY f.g, f.s
        ON CONFLICT (topic_id, message_group, seq) DO NOTHING
        RETURNING s.message_id)
    SELECT coalesce(array_agg(c.message_id), '{}') INTO v_seqs FROM claimed c;

    IF cardinality(v_keys) > 0 THEN
        EXECUTE format($q$
            UPDATE fanout_data.%I d SET message_id = sp.message_id
            FROM unnest($1, $2, $3, $4) AS u(k, g, s, id)
            JOIN fanout.seq_published sp
              ON sp.topic_id = $5 AND sp.message_group = u.g AND sp.seq = u.s
            WHERE u.id IN (SELECT unnest($6)) AND u.id NOT IN (SELECT unnest($7))
              AND d.dedupe_key = u.k$q$, p_t.data_table || '_dedupe')
            USING p_keys, p_groups, p_seqs, v_ids, p_t.topic_id, v_keys, v_seqs;
    END IF;

    -- (A sequence-ordered topic is never partitioned and refuses priorities
    -- and delivery times: those columns keep their defaults.)
    EXECUTE format($q$
        INSERT INTO fanout_data.%I (id, headers, message_group, payload, seq)
        SELECT u.id, coalesce(u.h, '{}'::jsonb), u.g, u.p, u.s
        FROM unnest($1, $2, $3, $4, $5) WITH ORDINALITY AS u(id, p, h, g, s, ord)
        WHERE u.id IN (SELECT unnest($6))
        ORDER BY u.ord$q$, p_t.data_table)
        USING v_ids, p_payloads, p_headers, p_groups, p_seqs, v_seqs;

    RETURN QUERY EXECUTE format($q$
        SELECT CASE
                   WHEN u.id IN (SELECT unnest($5)) THEN u.id
                   WHEN u.k IS NULL OR u.id IN (SELECT unnest($6)) THEN
                       (SELECT sp.message_id FROM fanout.seq_published sp
                        WHERE sp.topic_id = $7 AND sp.message_group = u.g AND sp.seq = u.s)
                   ELSE (SELECT d.message_id FROM fanout_data.%I d WHERE d.dedupe_key = u.k)
               END
        FROM unnest($1, $2, $3, $4) WITH ORDINALITY AS u(id, k, g, s, ord)
        ORDER BY u.ord$q$, p_t.data_table || '_dedupe')
        USING v_ids, p_keys, p_groups, p_seqs, v_seqs, v_keys, p_t.topic_id;
END
$fn$;
