-- fanout._summarize_partitions(p_topic_id, p_max): fills the summary columns
-- of closed partitions (row_count, first_txid, first_id,
-- oldest_published_at) once every transaction that could write them has
-- ended (txid_bound at or below the xmin of the current snapshot): from then
-- on their committed rows never change, so the summary stays exact until
-- cleanup empties them. One pass over each partition, once in its life.
-- Bounded: at most p_max partitions per call, oldest first. Returns how many
-- it summarized; call again while it returns > 0.
-- Tables: fanout.partition, fanout.topic, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._summarize_partitions(p_topic_id bigint, p_max int DEFAULT 4)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_p    fanout.partition;
    v_done int := 0;
    v_xmin xid8 := pg_snapshot_xmin(pg_current_snapshot());
BEGIN
    FOR v_p IN
        SELECT * FROM fanout.partition p
        WHERE p.topic_id = p_topic_id AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL
          AND p.row_count IS NULL AND p.txid_bound <= v_xmin
        ORDER BY p.part_no
        LIMIT p_max
    LOOP
        EXECUTE format(
            'SELECT (SELECT count(*) FROM fanout_data.%1$I),
                    f.txid, f.id,
                    (SELECT min(m.published_at) FROM fanout_data.%1$I m)
             FROM (SELECT NULL) x
             LEFT JOIN LATERAL (SELECT m.txid, m.id FROM fanout_data.%1$I m ORDER BY m.txid, m.id LIMIT 1) f ON true',
            v_p.relname)
        INTO v_p.row_count, v_p.first_txid, v_p.first_id, v_p.oldest_published_at;
        UPDATE fanout.partition p
        SET row_count = v_p.row_count, first_txid = v_p.first_txid, first_id = v_p.first_id,
            oldest_published_at = v_p.oldest_published_at
        WHERE p.topic_id = v_p.topic_id AND p.part_no = v_p.part_no;
        v_done := v_done + 1;
    END LOOP;
    RETURN v_done;
END
$fn$;
