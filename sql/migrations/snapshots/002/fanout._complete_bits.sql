-- fanout._complete_bits(p_group_id, p_ids, p_txids, p_acking, p_only): reference
-- mode: sets the group's bit in completed_groups of the messages given as
-- parallel arrays of ids and txids (restricted to p_only when not NULL; ids
-- are unique, and reference topics have an id index, so ids suffice) (acked or
-- dead-lettered: both count as done for the group). A message completes when
-- completed_groups covers required_groups; COMPLETED and unclaimed messages
-- are never modified. No-op for offset-mode groups. With p_acking, a paused
-- group's ack is refused (its members must not settle work while paused).
-- Returns how many messages changed.
-- An ack locks the message rows it completes until its transaction ends:
-- another group acking the same messages waits for it (see the comment at
-- the lock below and README, "Security and multi-tenancy").
-- Raises PGQ15 (ack by a paused reference-mode group).
-- Tables: fanout.consumer_group, fanout.topic, fanout_data.m<topic_id>.
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
    -- Lock the rows in id order first, so that one ack call never deadlocks
    -- with another ack call or a bitmap job (which walk ids in order). Two
    -- transactions that each ack several leases in opposite orders can still
    -- deadlock (40P01), and an ack waits while another group's open
    -- transaction has acked the same message: the rows are shared by every
    -- group. Documented in README ("Security and multi-tenancy"): keep ack
    -- transactions short, ack leases in ascending lease_id order, and retry
    -- the transaction on 40P01.
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM fanout_data.%I m WHERE m.id = ANY ($1)
                                          ORDER BY m.id FOR NO KEY UPDATE) s', v_table)
        INTO v_n USING coalesce(p_only, p_ids);
    EXECUTE format(
        'UPDATE fanout_data.%I m SET completed_groups = m.completed_groups | $1
         WHERE m.id = ANY ($2)
           AND (m.completed_groups & $1) = 0 AND (m.required_groups & ~m.completed_groups) <> 0', v_table)
        USING 1::bigint << v_bit, coalesce(p_only, p_ids);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
