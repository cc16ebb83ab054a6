-- fanout._create_done_function(p_topic_id): reference mode: (re)creates the
-- topic's completion function fanout_data.m<id>_done_add(p_bit, p_ids),
-- which records that the group with bit p_bit is done with the messages
-- p_ids: one row per storage partition in m<id>_done (the bit, the sorted
-- ids, their range), skipping a partition that cleanup has emptied (one
-- index probe for a message of the range: its completion partition may be
-- dropped already; both tables' partition lists are read when the
-- statement locks them, so they agree). Returns the rows written.
-- Static SQL, so each session plans it once: planning the same INSERT as
-- dynamic SQL over the two partitioned tables cost about four times its
-- execution on every ack (pg_stat_statements, load matrix).
-- Nobody but the owner may call it. Tables: fanout.topic; creates a function.
CREATE OR REPLACE FUNCTION fanout._create_done_function(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
BEGIN
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_bit smallint, p_ids bigint[])
        RETURNS int
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        SET enable_seqscan = off
        SET jit = off
        SET plan_cache_mode = force_generic_plan
        AS $body$
        DECLARE
            v_n int;
        BEGIN
            INSERT INTO fanout_data.%2$I (bit, lo, hi, ids)
            SELECT p_bit, s.lo, s.hi, s.ids
            FROM (SELECT min(u.id) AS lo, max(u.id) AS hi, array_agg(DISTINCT u.id ORDER BY u.id) AS ids
                  FROM unnest(p_ids) AS u(id) WHERE u.id IS NOT NULL GROUP BY u.id >> 32) s
            WHERE EXISTS (SELECT 1 FROM fanout_data.%3$I m WHERE m.id >= s.lo AND m.id <= s.hi);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            RETURN v_n;
        END
        $body$$ddl$, v_table || '_done_add', v_table || '_done', v_table);
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(smallint, bigint[]) FROM PUBLIC', v_table || '_done_add');
END
$fn$;
