-- fanout._grant_matches(p_pattern, p_topic): whether a grant pattern covers a
-- topic name (or, for p_topic ending in '%', every name of that prefix
-- pattern). A pattern ending in '%' is a prefix pattern: it covers every
-- name that starts with what comes before the '%' ('%' alone: every name);
-- any other pattern covers exactly the name equal to it. No other character
-- is special ('_' and a '%' elsewhere are literal). Touches no table.
CREATE OR REPLACE FUNCTION fanout._grant_matches(p_pattern text, p_topic text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT CASE WHEN right(p_pattern, 1) = '%'
                THEN starts_with(p_topic, left(p_pattern, -1))
                ELSE p_topic = p_pattern END
$fn$;
