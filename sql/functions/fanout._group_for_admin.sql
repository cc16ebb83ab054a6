-- fanout._group_for_admin(p_topic, p_group_name): the group an administrative
-- call names, locked FOR UPDATE, in any status. Queue topics: the implicit
-- group (p_group_name is ignored). Raises as fanout._topic and
-- fanout._lock_group. Tables: fanout.topic, fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._group_for_admin(p_topic text, p_group_name text)
RETURNS fanout.consumer_group
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t fanout.topic := fanout._topic(p_topic);
    v_g fanout.consumer_group;
BEGIN
    IF v_t.semantics = 'pubsub' THEN
        IF p_group_name IS NULL THEN
            RAISE EXCEPTION 'group_name is required on pubsub topic %', quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ13';
        END IF;
        SELECT * INTO v_g FROM fanout.consumer_group g
        WHERE g.topic_id = v_t.topic_id AND g.group_name = p_group_name FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'group % is not subscribed to topic %', quote_literal(p_group_name), quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ14';
        END IF;
        RETURN v_g;
    END IF;
    RETURN fanout._lock_group(v_t, NULL, false);
END
$fn$;
