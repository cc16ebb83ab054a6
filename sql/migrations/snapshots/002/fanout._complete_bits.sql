-- fanout._complete_bits(p_group_id, p_ids, p_txids, p_acking, p_only): reference
-- mode: records that the group is done with the messages given as parallel
-- arrays of ids and txids (restricted to p_only when not NULL; acked or
-- dead-lettered: both count as done for the group). A message completes when
-- the groups done with it cover its required_groups. Message rows are never
-- touched: one row per storage partition goes into the topic's completion
-- table fanout_data.m<topic_id>_done (the group's bit, the sorted ids and
-- their range), so an ack is one narrow insert however many groups share the
-- messages, and no ack waits for another group's. Recording a message twice
-- changes nothing (fanout._done_bits takes the union). Ids of a partition
-- that has been emptied (or dropped) are skipped: its messages are gone.
-- No-op for offset-mode groups. With p_acking, a paused group's ack is
-- refused (its members must not settle work while paused).
-- Returns how many completion rows were written (one per storage partition).
-- Raises PGQ15 (ack by a paused reference-mode group).
-- Tables: fanout.consumer_group, fanout.topic, fanout_data.m<topic_id>,
-- fanout_data.m<topic_id>_done (through fanout_data.m<topic_id>_done_add).
CREATE OR REPLACE FUNCTION fanout._complete_bits(
    p_group_id bigint, p_ids bigint[], p_txids xid8[], p_acking boolean, p_only bigint[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_bit    int;
    v_status text;
    v_group  text;
    v_table  text;
    v_n      int;
BEGIN
    SELECT g.bit_no, g.status, g.group_name, t.data_table INTO v_bit, v_status, v_group, v_table
    FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE g.group_id = p_group_id;
    IF v_bit IS NULL THEN
        RETURN 0;
    END IF;
    IF p_acking AND v_status = 'paused' THEN
        RAISE EXCEPTION 'group % is paused; its acks are refused until it resumes', quote_literal(v_group)
            USING ERRCODE = 'PGQ15', DETAIL = 'current status: paused';
    END IF;
    -- One row per storage partition, through the topic's generated function
    -- (static SQL, planned once per session: fanout._create_done_function).
    EXECUTE format('SELECT fanout_data.%I($1, $2)', v_table || '_done_add')
        INTO v_n USING v_bit::smallint, coalesce(p_only, p_ids);
    RETURN v_n;
END
$fn$;
