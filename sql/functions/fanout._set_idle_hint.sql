-- fanout._set_idle_hint(p_key, p_idle): records in the session setting
-- fanout.idle whether the group p_key names was just found idle (see
-- fanout._idle_hint); keeps at most the 32 most recent keys. Touches no table.
CREATE OR REPLACE FUNCTION fanout._set_idle_hint(p_key text, p_idle boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_old  text[] := coalesce(string_to_array(current_setting('fanout.idle', true), ' '), '{}');
    v_new  text[];
BEGIN
    IF (p_key = ANY (v_old)) = p_idle AND (NOT p_idle OR v_old[1] = p_key) THEN
        RETURN;  -- nothing changes: no set_config
    END IF;
    v_new := array_remove(v_old, p_key);
    IF p_idle THEN
        v_new := (ARRAY[p_key] || v_new)[1:32];
    END IF;
    PERFORM set_config('fanout.idle', array_to_string(v_new, ' '), false);
END
$fn$;
