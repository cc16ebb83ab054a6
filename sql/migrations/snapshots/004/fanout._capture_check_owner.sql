-- fanout._capture_check_owner(p_table, p_verb): the check fanout.capture_table
-- and fanout.uncapture_table share: only the table's owner (or a member of
-- its owning role) may capture or uncapture it. p_verb ('capture' or
-- 'uncapture') names the refused action in the message.
-- Raises: PGQ03 (NULL table), PGQ21 (not the owner).
-- Tables: pg_class.
CREATE OR REPLACE FUNCTION fanout._capture_check_owner(p_table regclass, p_verb text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_table IS NULL THEN
        RAISE EXCEPTION 'table_name must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF NOT pg_has_role(fanout._caller(), (SELECT c.relowner FROM pg_class c WHERE c.oid = p_table), 'USAGE') THEN
        RAISE EXCEPTION 'role % may not % table %: only its owner may',
            coalesce((SELECT quote_ident(r.rolname) FROM pg_roles r WHERE r.oid = fanout._caller()), 'unknown'),
            p_verb, p_table
            USING ERRCODE = 'PGQ21';
    END IF;
END
$fn$;
