-- fanout._measure_usage(p_now): maintenance of bytes quotas
-- (fanout.set_quota ... max_bytes): measures the bytes retained by up to 100
-- topics per call (message partitions, dedupe keys and completion tables
-- with their indexes, and the claim-check rows of statement captures in
-- fanout.capture_chunk: pg_column_size of each chunk, stored as it is, so
-- nothing is decompressed), those measured longest ago first and each at most
-- once a minute, into fanout.topic_usage; then, for every grant with a
-- max_bytes, stops publishing to the topics its pattern matches
-- (fanout.quota_block, checked by fanout._enter: PGQ25) while their sum is
-- over it, and lets it resume once a round finds it under. Does nothing
-- (and forgets every block) while no grant has a max_bytes. A topic whose
-- table another transaction holds is passed by (fanout._maint_lock_topic).
-- Bounded: at most 100 topics measured per call (topics passed by do not
-- count), none begun after 250 ms. Returns how many topics it measured
-- plus how many blocks it forgot; call again while it returns > 0. Takes
-- its own lock row (fanout._try_lock).
-- Raises: PGQ03 (p_now NULL or infinite), PGQ21.
-- Tables: fanout.topic_usage, fanout.quota_block, fanout.topic,
-- fanout.topic_grant, fanout.maint_skip, fanout.capture_chunk (its topic's
-- rows, by the primary key's prefix); sizes of fanout_data.m<topic_id>*.
CREATE OR REPLACE FUNCTION fanout._measure_usage(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    t        record;
    v_done   int := 0;
    v_seen   int := 0;
    v_bytes  bigint;
    c_func   constant text := 'fanout._measure_usage';
    v_start  timestamptz := clock_timestamp();
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    PERFORM fanout._check_now(p_now);
    IF NOT fanout._try_lock('maint:measure_usage') THEN
        RETURN 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fanout.topic_grant g WHERE g.max_bytes IS NOT NULL) THEN
        DELETE FROM fanout.quota_block;
        GET DIAGNOSTICS v_done = ROW_COUNT;
        DELETE FROM fanout.topic_usage;
        RETURN v_done;
    END IF;
    DELETE FROM fanout.topic_usage u WHERE NOT EXISTS (SELECT 1 FROM fanout.topic x WHERE x.topic_id = u.topic_id);
    FOR t IN
        SELECT x.topic_id, x.data_table FROM fanout.topic x
        LEFT JOIN fanout.topic_usage u ON u.topic_id = x.topic_id
        WHERE u.measured_at IS NULL OR u.measured_at <= p_now - interval '1 minute' OR u.measured_at > p_now
        ORDER BY u.measured_at NULLS FIRST, x.topic_id
    LOOP
        -- 100 measured, not 100 visited: a topic passed by stays first in
        -- this order (never measured), and 100 of them held by one
        -- tenant's open transaction made every call measure nothing.
        EXIT WHEN v_done >= 100 OR (v_seen > 0 AND clock_timestamp() - v_start > interval '250 ms');
        v_seen := v_seen + 1;
        IF NOT fanout._maint_lock_topic(c_func, t.topic_id) THEN
            CONTINUE;
        END IF;
        SELECT coalesce(sum(pg_total_relation_size(p.relid)), 0) INTO v_bytes
        FROM (SELECT r.relid FROM pg_partition_tree(format('fanout_data.%I', t.data_table)::regclass) r
              UNION ALL
              SELECT to_regclass(format('fanout_data.%I', t.data_table || '_dedupe'))
              UNION ALL
              SELECT r.relid FROM pg_partition_tree(to_regclass(format('fanout_data.%I', t.data_table || '_done'))) r) p
        WHERE p.relid IS NOT NULL;
        -- A statement capture's claim-checks are kept for the topic as long
        -- as its messages (fanout._capture_release_chunks): a tenant's quota
        -- counts them, or claim-checks would retain bytes past it.
        v_bytes := v_bytes + coalesce((SELECT sum(pg_column_size(k.rows)) FROM fanout.capture_chunk k
                                       WHERE k.topic_id = t.topic_id), 0);
        INSERT INTO fanout.topic_usage AS u (topic_id, bytes, measured_at) VALUES (t.topic_id, v_bytes, p_now)
        ON CONFLICT (topic_id) DO UPDATE SET bytes = excluded.bytes, measured_at = excluded.measured_at;
        v_done := v_done + 1;
    END LOOP;
    -- The blocks, from every measurement so far. A topic matches a quota's
    -- pattern as fanout._grant_matches says, written out here: that
    -- function (it has SET search_path) is not inlined, and called once
    -- per topic and pattern it was most of a call's CPU time at thousands
    -- of topics (the sums are over every topic on every call).
    WITH quota AS (
        SELECT g.pattern, min(g.max_bytes) AS max_bytes,
               right(g.pattern, 1) = '%' AS prefix, left(g.pattern, -1) AS head
        FROM fanout.topic_grant g WHERE g.max_bytes IS NOT NULL GROUP BY g.pattern),
    sums AS (
        SELECT q.pattern, q.max_bytes, q.prefix, q.head, coalesce(sum(u.bytes), 0) AS bytes
        FROM quota q
        LEFT JOIN fanout.topic x ON CASE WHEN q.prefix THEN starts_with(x.topic, q.head) ELSE x.topic = q.pattern END
        LEFT JOIN fanout.topic_usage u ON u.topic_id = x.topic_id
        GROUP BY q.pattern, q.max_bytes, q.prefix, q.head),
    over AS (
        SELECT DISTINCT ON (x.topic_id) x.topic_id, s.pattern, s.bytes, s.max_bytes
        FROM sums s JOIN fanout.topic x ON CASE WHEN s.prefix THEN starts_with(x.topic, s.head) ELSE x.topic = s.pattern END
        WHERE s.bytes > s.max_bytes
        ORDER BY x.topic_id, s.pattern),
    gone AS (
        DELETE FROM fanout.quota_block b WHERE NOT EXISTS (SELECT 1 FROM over o WHERE o.topic_id = b.topic_id))
    INSERT INTO fanout.quota_block AS b (topic_id, pattern, bytes, max_bytes, since)
    SELECT o.topic_id, o.pattern, o.bytes, o.max_bytes, p_now FROM over o
    ON CONFLICT (topic_id) DO UPDATE SET pattern = excluded.pattern, bytes = excluded.bytes, max_bytes = excluded.max_bytes;
    RETURN v_done;
END
$fn$;
