-- fanout._assign_bit(p_t): a free bit (0..63) for a new reference-mode group
-- of topic p_t: held by no group row (cancelled groups keep theirs until
-- subscription cleanup deletes them) and mentioned by no retained message, so
-- a reused bit never inherits old state. Lowest free bit first.
-- Raises PGQ17 when all 64 are taken. Reads fanout.consumer_group, the
-- topic's message table and its completion table (one scan each).
CREATE OR REPLACE FUNCTION fanout._assign_bit(p_t fanout.topic)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_used bigint;
    v_bit  int;
BEGIN
    -- Serialise bit assignment per topic.
    PERFORM 1 FROM fanout.topic_state s WHERE s.topic_id = p_t.topic_id FOR UPDATE;
    SELECT coalesce(bit_or(1::bigint << g.bit_no), 0) INTO v_used
    FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id AND g.bit_no IS NOT NULL;
    IF v_used <> -1 THEN
        EXECUTE format('SELECT $1 | coalesce((SELECT bit_or(m.required_groups) FROM fanout_data.%I m), 0)
                                  | coalesce((SELECT bit_or(1::bigint << d.bit) FROM fanout_data.%I d), 0)',
                       p_t.data_table, p_t.data_table || '_done') INTO v_used USING v_used;
    END IF;
    SELECT b INTO v_bit FROM generate_series(0, 63) AS b WHERE (v_used & (1::bigint << b)) = 0 ORDER BY b LIMIT 1;
    IF v_bit IS NULL THEN
        RAISE EXCEPTION 'topic % already has 64 groups, the limit of completion ''reference''; use completion ''offset'' for unlimited groups',
            quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ17',
                  HINT = 'or unsubscribe groups: a bit is reused once subscription cleanup removed its group and no retained message mentions it';
    END IF;
    RETURN v_bit;
END
$fn$;
