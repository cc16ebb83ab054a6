-- fanout._create_partition(p_topic_id, p_part_no): creates partition number
-- p_part_no of a topic's message table, covering message ids
-- [p_part_no << 32, (p_part_no + 1) << 32), and records it in fanout.partition.
-- Created standalone and then ATTACHed, which takes only SHARE UPDATE
-- EXCLUSIVE on the parent, so publishers are never blocked. Reference-mode
-- topics (and topics whose switch to offset is in progress) get the matching
-- partition m<id>_done_p<n> of their completion table; a topic switched to
-- reference from offset an index on id (its table has none of its own).
-- Returns the partition's relation name. Tables: fanout.topic,
-- fanout.partition, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._create_partition(p_topic_id bigint, p_part_no int)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_rel   text;
    v_lo    bigint := p_part_no::bigint << 32;
    v_hi    bigint := (p_part_no::bigint + 1) << 32;
BEGIN
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    v_rel := v_table || '_p' || p_part_no;
    EXECUTE format('CREATE TABLE fanout_data.%I (LIKE fanout_data.%I INCLUDING DEFAULTS INCLUDING STORAGE)',
                   v_rel, v_table);
    EXECUTE format('ALTER TABLE fanout_data.%I ATTACH PARTITION fanout_data.%I FOR VALUES FROM (%s) TO (%s)',
                   v_table, v_rel, v_lo, v_hi);
    IF EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = p_topic_id
               AND (t.completion = 'reference'  -- or switching to offset: its groups' acks still record them
                    OR t.completion_switch_id IS NOT NULL AND t.completion_switch_done_at IS NULL)) THEN
        -- The completion rows of these ids (fanout._complete_bits) go into a
        -- partition of their own with the same bounds, emptied and dropped
        -- together with this one (fanout._cleanup_partitions).
        EXECUTE format('CREATE TABLE fanout_data.%I (LIKE fanout_data.%I INCLUDING DEFAULTS)',
                       v_table || '_done_p' || p_part_no, v_table || '_done');
        EXECUTE format('ALTER TABLE fanout_data.%I ATTACH PARTITION fanout_data.%I FOR VALUES FROM (%s) TO (%s)',
                       v_table || '_done', v_table || '_done_p' || p_part_no, v_lo, v_hi);
    END IF;
    IF to_regclass(format('fanout_data.%I', v_table || '_id')) IS NULL
       AND EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = p_topic_id AND t.completion = 'reference') THEN
        -- Switched to reference from offset: the message table has no (id)
        -- index of its own (fanout._completion_switch_reference); each new
        -- partition gets one, for the bitmap jobs' batches. Empty: at once.
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON fanout_data.%I (id)', v_rel || '_id', v_rel);
    END IF;
    INSERT INTO fanout.partition (topic_id, part_no, lo_id, hi_id, relname, created_at, created_xid, opened_at)
    VALUES (p_topic_id, p_part_no, v_lo, v_hi, v_rel, clock_timestamp(), pg_current_xact_id(),
            CASE WHEN NOT EXISTS (SELECT 1 FROM fanout.partition p
                                  WHERE p.topic_id = p_topic_id AND p.closed_at IS NULL)
                 THEN clock_timestamp() END);
    RETURN v_rel;
END
$fn$;
