-- fanout._topic_lock_key(p_topic): the base of the advisory lock keys that
-- keep a topic from being dropped under its users: a 64-bit hash of the name
-- in NFC. There are 32 keys per topic, base # 0 .. base # 31 (xor, so no
-- overflow): fanout._enter takes one of them shared, chosen by the backend's
-- pid, and fanout.drop_topic takes all 32 exclusively, in order. One key
-- shared by every user of a topic put every call on the same lock-manager
-- partition (an advisory lock never takes the fast path; a member storm's
-- 150 readers queued on that partition's LWLock); 32 keys spread them over
-- most of the 16 partitions.
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
