-- fanout._effective_start(p_t, p_g): what fanout.subscribe reports as
-- effective_start_message_id for a group that already exists: as on its
-- first subscribe, the first retained message from its start on (NULL for a
-- 'latest' group, or when nothing from its start is retained). (Subscribing
-- again used to return the internal start id, 0 for 'earliest'.)
-- Reads the topic's message table.
CREATE OR REPLACE FUNCTION fanout._effective_start(p_t fanout.topic, p_g fanout.consumer_group)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_id bigint;
BEGIN
    IF p_g.start_position = 'latest' THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT min(id) FROM fanout_data.%I WHERE id >= $1', p_t.data_table)
        INTO v_id USING coalesce(p_g.effective_start_id, 0);
    RETURN v_id;
END
$fn$;
