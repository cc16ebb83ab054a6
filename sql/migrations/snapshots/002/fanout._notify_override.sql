-- fanout._notify_override(p_t, p_notify, p_before): applies a publish call's
-- notify argument around its insert, when it differs from the topic's
-- setting. notify => false suppresses the topic's NOTIFY for this call only
-- (PREPARE TRANSACTION refuses a transaction that sent a NOTIFY, so two-phase
-- commit publishers pass it): before the insert it sets the transaction-local
-- flag fanout.notify_off that fanout._notify_trigger reads, after it clears
-- it. notify => true on a topic without NOTIFY sends one after the insert.
-- NULL or equal to the topic's setting: nothing. Touches no table.
CREATE OR REPLACE FUNCTION fanout._notify_override(p_t fanout.topic, p_notify boolean, p_before boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_notify IS NULL OR p_notify = p_t.notify THEN
        RETURN;
    END IF;
    IF NOT p_notify THEN
        PERFORM set_config('fanout.notify_off', CASE WHEN p_before THEN 'on' ELSE '' END, true);
    ELSIF NOT p_before THEN
        PERFORM pg_notify(fanout.channel_name(p_t.topic_id), '');
    END IF;
END
$fn$;
