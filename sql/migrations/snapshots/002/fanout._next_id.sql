-- fanout._next_id(p_t): the next message id the topic's sequence will hand
-- out. Reads the topic's id sequence.
CREATE OR REPLACE FUNCTION fanout._next_id(p_t fanout.topic)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_next bigint;
BEGIN
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM fanout_data.%I',
                   p_t.seq_name) INTO v_next;
    RETURN v_next;
END
$fn$;
