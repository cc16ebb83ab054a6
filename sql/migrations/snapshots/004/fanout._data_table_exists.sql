-- fanout._data_table_exists(p_relname): whether table fanout_data.p_relname
-- exists in the calling statement's snapshot. Unlike to_regclass, which
-- reads the newest catalog, it agrees with the fanout catalog rows read by
-- the same statement, so a check that compares them sees one moment.
-- Parameters: p_relname, a table name in schema fanout_data. Returns
-- boolean. Tables: pg_class, pg_namespace.
CREATE OR REPLACE FUNCTION fanout._data_table_exists(p_relname text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'fanout_data' AND c.relname = p_relname);
$fn$;
