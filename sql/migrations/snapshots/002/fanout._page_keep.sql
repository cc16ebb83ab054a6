-- fanout._page_keep(p_scan, p_arg): wraps a page scan of fanout._window_page
-- (p_scan: a query returning txid, id, payload, headers, message_group,
-- published_at, deliver_at in (txid, id) order, LIMIT included) into the query that
-- aggregates it, keeping only the rows that fit in the byte budget:
-- parameter $p_arg is the budget left, $(p_arg + 1) whether the page is still
-- empty (then its first row always comes, whatever its size). A row's size is
-- that of its payload, headers and message_group as stored uncompressed
-- (pg_column_size when not compressed, else the length of the JSON text), so
-- small rows cost no detoasting. The kept rows are a prefix of the scan.
-- The query returns the seven arrays, the bytes kept, and whether a row was
-- left out for the budget (the caller must then end the page: the cursor is
-- at the last kept row). Touches no table.
CREATE OR REPLACE FUNCTION fanout._page_keep(p_scan text, p_arg int)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT format(
        'SELECT array_agg(k.id) FILTER (WHERE k.keep), array_agg(k.txid) FILTER (WHERE k.keep),
                array_agg(k.payload) FILTER (WHERE k.keep), array_agg(k.headers) FILTER (WHERE k.keep),
                array_agg(k.message_group) FILTER (WHERE k.keep), array_agg(k.published_at) FILTER (WHERE k.keep),
                array_agg(k.deliver_at) FILTER (WHERE k.keep),
                sum(k.sz) FILTER (WHERE k.keep), coalesce(bool_or(NOT k.keep), false)
         FROM (SELECT z.*, z.run <= $%1$s OR (z.rn = 1 AND $%2$s) AS keep
               FROM (SELECT s.*, sum(s.sz) OVER w AS run, row_number() OVER w AS rn
                     FROM (SELECT s0.*,
                                  CASE WHEN pg_column_compression(s0.payload) IS NULL THEN pg_column_size(s0.payload)
                                       ELSE octet_length(s0.payload::text) END
                                  + CASE WHEN pg_column_compression(s0.headers) IS NULL THEN pg_column_size(s0.headers)
                                         ELSE octet_length(s0.headers::text) END
                                  + coalesce(octet_length(s0.message_group), 0) AS sz
                           FROM (%3$s) s0) s
                     WINDOW w AS (ORDER BY s.txid, s.id ROWS UNBOUNDED PRECEDING)) z) k',
        p_arg, p_arg + 1, p_scan)
$fn$;
