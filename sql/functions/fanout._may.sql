-- fanout._may(p_topic, p_privilege): whether the caller (fanout._caller) may
-- use topic p_topic (a name; it need not exist) with p_privilege 'publish',
-- 'consume', 'admin', or 'any' (some grant at all: what fanout.topics shows).
-- The check itself is fanout._grant_ok's (superuser or a member of the
-- owner of schema fanout, else the privilege's group role and a matching
-- grant), which fanout._enter_topic calls too.
-- No side effect (STABLE: views filter by it, and a STABLE function may be
-- called any number of times, or not at all, per row): the entry points'
-- note of the allowed caller is fanout._authorize's.
-- Tables: fanout.topic_grant, pg_namespace (fanout._grant_ok).
CREATE OR REPLACE FUNCTION fanout._may(p_topic text, p_privilege text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller oid := fanout._caller();
    v_topic  text := fanout._nfc(p_topic);
BEGIN
    IF v_caller IS NULL OR p_topic IS NULL THEN
        RETURN false;
    END IF;
    RETURN coalesce(fanout._grant_ok(v_caller, v_topic, p_privilege), false);
END
$fn$;
