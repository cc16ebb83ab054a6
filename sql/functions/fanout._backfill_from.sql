-- fanout._backfill_from(p_t, p_start_id, p_max): the first message id of the
-- newest p_max retained messages with id >= p_start_id (p_start_id itself
-- when fewer are retained; the next id to be assigned when p_max is 0; NULL
-- p_max = no cap). Reads the topic's message table and id sequence.
CREATE OR REPLACE FUNCTION fanout._backfill_from(p_t fanout.topic, p_start_id bigint, p_max bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_cut bigint;
    v_n   bigint;
BEGIN
    IF p_max IS NULL THEN
        RETURN p_start_id;
    END IF;
    IF p_max = 0 THEN
        RETURN fanout._next_id(p_t);
    END IF;
    EXECUTE format('SELECT min(s.id), count(*) FROM (SELECT id FROM fanout_data.%I WHERE id >= $1
                                                    ORDER BY id DESC LIMIT $2) s', p_t.data_table)
        INTO v_cut, v_n USING p_start_id, p_max;
    RETURN CASE WHEN v_n >= p_max THEN greatest(p_start_id, v_cut) ELSE p_start_id END;
END
$fn$;
