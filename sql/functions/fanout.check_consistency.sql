-- fanout.check_consistency(): rows describing inconsistencies between pgq's
-- bookkeeping and its data; none on a healthy system. Checks: lease arrays
-- and counters agree; no open lease or retry belongs to a cancelled group; a
-- message is not both in a retry and an open lease of one group; queue topics
-- have exactly one implicit group and pubsub topics none; every topic has an
-- open partition and every catalogued partition exists (and vice versa), and
-- its table of dedupe keys exists; no message a group holds (parked,
-- retry, open lease) lies in a dropped partition;
-- group windows are ordered (xmax(lo) <= xmax(hi)); reference mode: the
-- topic's required_mask matches its groups, and no pending message still
-- requires a group that is gone (dead or cancelled with its release done,
-- or deleted).
-- Tables are looked up in pg_class under the statement's snapshot, the one
-- the catalog rows are read with (to_regclass reads the newest catalog: a
-- partition dropped by maintenance while this ran was reported as
-- catalogued but missing).
-- Reports on every tenant, so the caller needs an admin grant on '%' (all
-- topics, fanout._authorize_all); raises PGQ21 otherwise.
-- Tables: every fanout table, pg_class, fanout_data.* (reference mode).
CREATE OR REPLACE FUNCTION fanout.check_consistency()
RETURNS TABLE(topic text, group_name text, message_id bigint, status text, problem text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t    fanout.topic;
    v_gone bigint;
BEGIN
    PERFORM fanout._authorize_all();
    RETURN QUERY
    SELECT t.topic, g.group_name, NULL::bigint, 'error'::text,
           format('lease %s: arrays of different lengths (%s ids, %s txids, %s attempts)',
                  fanout._lease_code(l.lease_id, true), cardinality(l.msg_ids), cardinality(l.msg_txids), cardinality(l.attempts))
    FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id) JOIN fanout.topic t USING (topic_id)
    WHERE cardinality(l.msg_ids) <> cardinality(l.msg_txids) OR cardinality(l.msg_ids) <> cardinality(l.attempts)
    UNION ALL
    SELECT t.topic, g.group_name, NULL, 'error',
           format('lease %s: open_count %s but %s messages are neither settled nor reclaimed',
                  fanout._lease_code(l.lease_id, true), l.open_count, o.n)
    FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id) JOIN fanout.topic t USING (topic_id)
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM unnest(l.msg_ids) AS x
                        WHERE x <> ALL (l.settled) AND x <> ALL (l.reclaimed)) o
    WHERE o.n <> l.open_count
      AND NOT (l.open_count = 0 AND l.reclaimed = '{}' AND l.settled = '{}')  -- settled in full
    UNION ALL
    SELECT t.topic, g.group_name, NULL, 'error',
           format('cancelled group holds %s open lease(s) and %s retries',
                  (SELECT count(*) FROM fanout.lease l WHERE l.group_id = g.group_id AND l.open_count > 0),
                  (SELECT count(*) FROM fanout.retry r WHERE r.group_id = g.group_id))
    FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id)
    WHERE g.status = 'cancelled'
      AND (EXISTS (SELECT 1 FROM fanout.lease l WHERE l.group_id = g.group_id AND l.open_count > 0)
           OR EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = g.group_id))
    UNION ALL
    SELECT t.topic, g.group_name, r.message_id, 'error', 'message is both pending retry and in an open lease'
    FROM fanout.retry r JOIN fanout.consumer_group g USING (group_id) JOIN fanout.topic t USING (topic_id)
    WHERE EXISTS (SELECT 1 FROM fanout.lease l
                  WHERE l.group_id = r.group_id AND l.open_count > 0 AND r.message_id = ANY (l.msg_ids)
                    AND r.message_id <> ALL (l.settled) AND r.message_id <> ALL (l.reclaimed))
    UNION ALL
    SELECT t.topic, NULL, NULL, 'error',
           format('%s topic has %s implicit group(s)', t.semantics,
                  (SELECT count(*) FROM fanout.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name IS NULL))
    FROM fanout.topic t
    WHERE (SELECT count(*) FROM fanout.consumer_group g WHERE g.topic_id = t.topic_id AND g.group_name IS NULL)
          <> CASE t.semantics WHEN 'queue' THEN 1 ELSE 0 END
    UNION ALL
    SELECT t.topic, NULL, NULL, 'error', 'topic has no open partition'
    FROM fanout.topic t
    WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p WHERE p.topic_id = t.topic_id AND p.closed_at IS NULL)
    UNION ALL
    SELECT t.topic, NULL, NULL, 'error', format('partition %s is catalogued but does not exist', p.relname)
    FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
    WHERE NOT fanout._data_table_exists(p.relname)
    UNION ALL
    SELECT t.topic, NULL, NULL, 'error', format('table of dedupe keys %s does not exist', t.data_table || '_dedupe')
    FROM fanout.topic t
    WHERE NOT fanout._data_table_exists(t.data_table || '_dedupe')
    UNION ALL
    -- The drop rule (docs/architecture.md, "Partitions"): a message a group
    -- holds (parked for its sequence's turn, waiting for a retry, under an
    -- open lease) pins its partition; cleanup drops it only with the message
    -- counted as lost and released. One still held in no retained partition
    -- was dropped uncounted.
    SELECT t.topic, g.group_name, h.message_id, 'error',
           format('%s message is in no retained partition (dropped without being counted as lost)', h.kind)
    FROM (SELECT w.group_id, w.message_id, 'parked' AS kind FROM fanout.seq_wait w
          UNION ALL
          SELECT r.group_id, r.message_id, 'retry' FROM fanout.retry r
          UNION ALL
          SELECT l.group_id, x, 'leased' FROM fanout.lease l CROSS JOIN LATERAL unnest(l.msg_ids) AS x
          WHERE l.open_count > 0 AND x <> ALL (l.settled) AND x <> ALL (l.reclaimed)) h
    JOIN fanout.consumer_group g ON g.group_id = h.group_id JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p
                      WHERE p.topic_id = t.topic_id AND p.truncated_at IS NULL
                        AND h.message_id >= p.lo_id AND h.message_id < p.hi_id)
    UNION ALL
    SELECT NULL, NULL, NULL, 'error', format('table fanout_data.%s is not catalogued', c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'fanout_data' AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT 1 FROM fanout.partition p WHERE p.relname = c.relname)
      AND NOT EXISTS (SELECT 1 FROM fanout.topic t WHERE t.data_table = c.relname)
      AND NOT EXISTS (SELECT 1 FROM fanout.topic t WHERE t.data_table || '_dedupe' = c.relname)
      -- reference mode (and switched from it): the completion table and its partitions
      AND NOT EXISTS (SELECT 1 FROM fanout.topic t
                      WHERE (t.completion = 'reference' OR t.completion_switch_id IS NOT NULL)
                        AND t.data_table || '_done' = c.relname)
      AND NOT EXISTS (SELECT 1 FROM fanout.partition p JOIN fanout.topic t USING (topic_id)
                      WHERE (t.completion = 'reference' OR t.completion_switch_id IS NOT NULL)
                        AND t.data_table || '_done_p' || p.part_no = c.relname)
    UNION ALL
    SELECT t.topic, g.group_name, NULL, 'error', 'group window is out of order (xmax(lo) > xmax(hi))'
    FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id)
    WHERE pg_snapshot_xmax(g.win_lo) > pg_snapshot_xmax(g.win_hi);

    RETURN QUERY
    SELECT t.topic, NULL::text, NULL::bigint, 'error'::text,
           format('required_mask %s differs from its groups'' %s', s.required_mask, fanout._required_mask(t.topic_id))
    FROM fanout.topic_state s JOIN fanout.topic t USING (topic_id)
    WHERE s.required_mask <> fanout._required_mask(t.topic_id);

    FOR v_t IN SELECT * FROM fanout.topic t WHERE t.completion = 'reference' LOOP
        -- Bits of groups that no longer consume and whose release is done
        -- (messages whose stamps wait to be reconciled are not judged yet).
        SELECT coalesce(bit_or(~0::bigint), 0) & ~fanout._required_mask(v_t.topic_id)
               & ~coalesce((SELECT bit_or(1::bigint << g.bit_no) FROM fanout.consumer_group g
                            WHERE g.topic_id = v_t.topic_id AND g.bit_no IS NOT NULL
                              AND (g.status IN ('active', 'paused')
                                   OR EXISTS (SELECT 1 FROM fanout.bitmap_job j
                                              WHERE j.group_id = g.group_id AND j.kind = 'release'
                                                AND j.status <> 'completed'))), 0)
        INTO v_gone;
        RETURN QUERY EXECUTE format(
            'SELECT $1, NULL::text, m.id, ''error''::text,
                    format(''pending message requires released or unknown group bits %%s'',
                           m.required_groups & ~coalesce(c.bits, 0) & $2)
             FROM fanout_data.%I m
             LEFT JOIN (SELECT u.id, bit_or(1::bigint << d.bit) AS bits
                        FROM fanout_data.%I d CROSS JOIN LATERAL unnest(d.ids) AS u(id)
                        GROUP BY u.id) c ON c.id = m.id
             WHERE (m.required_groups & ~coalesce(c.bits, 0) & $2) <> 0 AND m.id >= $4
               AND NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = $3 AND s.txid = m.txid)
             LIMIT 100', v_t.data_table, v_t.data_table || '_done')
            USING v_t.topic, v_gone, v_t.topic_id, coalesce(v_t.completion_switch_id, 0);
    END LOOP;
END
$fn$;
