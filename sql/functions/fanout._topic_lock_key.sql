-- fanout._topic_lock_key(p_topic): the advisory lock key that keeps a topic
-- from being dropped under its users (fanout._enter takes it shared,
-- fanout.drop_topic exclusively): a 64-bit hash of the name in NFC.
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._topic_lock_key(p_topic text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN hashtextextended('fanout.topic_use:' || fanout._nfc(p_topic), 0);
END
$fn$;
