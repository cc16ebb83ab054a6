-- fanout._topic_stats(p_topic_id): size figures of a topic for fanout.topics:
-- messages (exact for partitions under 100,000 rows, planner estimate above),
-- age of the oldest retained message, partition count, bytes on disk
-- (reference mode: with the completion partitions).
-- Reads fanout.partition, pg_class and the topic's partitions.
CREATE OR REPLACE FUNCTION fanout._topic_stats(
    p_topic_id bigint,
    OUT messages bigint, OUT oldest_message_age interval, OUT partitions int, OUT bytes bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    p      record;
    v_n    bigint;
    v_at   timestamptz;
BEGIN
    messages := 0;
    partitions := 0;
    bytes := 0;
    FOR p IN
        SELECT fp.relname, c.oid AS relid, c.reltuples, t.data_table || '_done_p' || fp.part_no AS done_rel
        FROM fanout.partition fp
        JOIN fanout.topic t ON t.topic_id = fp.topic_id
        JOIN pg_class c ON c.relname = fp.relname
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'fanout_data'
        WHERE fp.topic_id = p_topic_id
        ORDER BY fp.part_no
    LOOP
        partitions := partitions + 1;
        bytes := bytes + pg_total_relation_size(p.relid)
                 + coalesce(pg_total_relation_size(to_regclass(format('fanout_data.%I', p.done_rel))), 0);
        IF p.reltuples >= 100000 THEN
            v_n := p.reltuples::bigint;
        ELSE
            EXECUTE format('SELECT count(*) FROM fanout_data.%I', p.relname) INTO v_n;
        END IF;
        messages := messages + v_n;
        IF oldest_message_age IS NULL AND v_n > 0 THEN
            EXECUTE format('SELECT published_at FROM fanout_data.%I ORDER BY txid, id LIMIT 1', p.relname) INTO v_at;
            oldest_message_age := clock_timestamp() - v_at;
        END IF;
    END LOOP;
END
$fn$;
