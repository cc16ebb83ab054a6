-- fanout._capture_image(p_row, p_columns, p_exclude): a captured row's image:
-- the row as jsonb limited to p_columns (NULL: every column) without
-- p_exclude. Touches no table.
CREATE OR REPLACE FUNCTION fanout._capture_image(p_row jsonb, p_columns text[], p_exclude text[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT CASE WHEN p_columns IS NULL THEN p_row - p_exclude
                ELSE coalesce((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(p_row) e
                               WHERE e.key = ANY (p_columns) AND e.key <> ALL (p_exclude)), '{}') END
$fn$;
