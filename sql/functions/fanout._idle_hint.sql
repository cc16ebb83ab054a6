-- fanout._idle_hint(p_key): whether this session's last read of the group
-- p_key names (fanout._idle_key) found nothing, so the next read peeks
-- before it locks (fanout.read). The hints live in one session setting,
-- fanout.idle, holding the keys of at most the 32 groups most recently found
-- idle: a session reading thousands of groups keeps one short setting
-- (one setting per group made reads slow down after 12,000 groups).
-- Never NULL: a session that never set the hint has none (a NULL here made
-- every read of a busy session peek). The hint is only a shortcut: a forged
-- one costs the peek or a lock, never a message. Touches no table.
CREATE OR REPLACE FUNCTION fanout._idle_hint(p_key text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN coalesce(p_key = ANY (string_to_array(current_setting('fanout.idle', true), ' ')), false);
END
$fn$;
