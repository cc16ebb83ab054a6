-- fanout._idle_hint(p_key): whether this session's last read of the group
-- p_key names (fanout._idle_key) found nothing, so the next read peeks
-- before it locks (fanout.read). The hints live in one session setting,
-- fanout.idle, holding the keys of at most the 32 groups most recently found
-- idle: a session reading thousands of groups keeps one short setting
-- (one setting per group made reads slow down after 12,000 groups).
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._idle_hint(p_key text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT p_key = ANY (string_to_array(current_setting('fanout.idle', true), ' '))
$fn$;
