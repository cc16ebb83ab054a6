-- fanout._lock_group(p_t, p_group_name, p_resurrect, p_any_status): the
-- consumer group a call acts on, locked FOR NO KEY UPDATE (claims within one group are serialised;
-- different groups never wait for each other). Not FOR UPDATE: foreign-key
-- checks of rows that reference the group (a bitmap job's checkpoint, a
-- lease) take KEY SHARE on it, and must not wait for a claim or an admin
-- call (a bitmap step holding its job row would deadlock with unsubscribe).
-- Queue topics have one implicit group and ignore p_group_name (attribution
-- only). On pubsub topics p_group_name is required. With p_resurrect, a dead
-- group becomes active again (a read or heartbeat proves it is alive). With
-- p_any_status a cancelled group is returned instead of refused.
-- Raises: PGQ13 group_name missing on a pubsub topic, PGQ14 unknown group,
-- PGQ16 cancelled group. Tables: fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._lock_group(
    p_t fanout.topic, p_group_name text, p_resurrect boolean, p_any_status boolean DEFAULT false)
RETURNS fanout.consumer_group
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g fanout.consumer_group;
BEGIN
    IF p_t.semantics = 'queue' THEN
        SELECT * INTO STRICT v_g FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.group_name IS NULL FOR NO KEY UPDATE;
        RETURN v_g;
    END IF;
    IF p_group_name IS NULL THEN
        RAISE EXCEPTION 'group_name is required on pubsub topic %', quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ13';
    END IF;
    SELECT * INTO v_g FROM fanout.consumer_group g
    WHERE g.topic_id = p_t.topic_id AND g.group_name = fanout._nfc(p_group_name) FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'group % is not subscribed to topic %', quote_literal(p_group_name), quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ14', HINT = 'subscribe it with fanout.subscribe()';
    END IF;
    IF v_g.status = 'cancelled' AND NOT p_any_status THEN
        RAISE EXCEPTION 'group % of topic % is cancelled', quote_literal(p_group_name), quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ16';
    END IF;
    IF v_g.status = 'dead' AND p_resurrect THEN
        v_g := fanout._resurrect(v_g);
    END IF;
    RETURN v_g;
END
$fn$;
