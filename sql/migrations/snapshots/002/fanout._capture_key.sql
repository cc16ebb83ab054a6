-- fanout._capture_key(p_row, p_key_columns): a captured row's primary key as
-- a jsonb object (column -> value). Touches no table.
CREATE OR REPLACE FUNCTION fanout._capture_key(p_row jsonb, p_key_columns text[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT jsonb_object_agg(k, p_row -> k) FROM unnest(p_key_columns) AS k
$fn$;
