-- fanout.capture_rows(topic, message_id, side, after, max_rows): the rows of
-- a statement-shaped capture message's claim-check (fanout.capture_table(...,
-- shape => 'statement'); docs/capture.md), one page at a time: rows of
-- side ('inserted': the new images, 'deleted': the old ones) numbered from
-- 1 in the order the statement wrote them, those after row number `after`,
-- at most max_rows (1..10000), in order. Page on with after = the last
-- row_no returned until the message's claim_check count is reached. An
-- UPDATE's deleted row i is the old image of its inserted row i. No rows:
-- the message has no claim-check (its rows are inline), is not committed,
-- or its storage is gone (the rows are released with it).
-- Needs a consume grant on the topic (as read).
-- Raises: PGQ01 (no such topic), PGQ03 (NULL message_id or after, after < 0,
-- side not 'inserted'/'deleted', max_rows out of range), PGQ21 (no grant).
-- Tables: fanout.capture_chunk, fanout.topic.
CREATE OR REPLACE FUNCTION fanout.capture_rows(
    topic       text,
    message_id  bigint,
    side        text DEFAULT 'inserted',
    after       bigint DEFAULT 0,
    max_rows    int DEFAULT 1000)
RETURNS TABLE (row_no bigint, image jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
BEGIN
    PERFORM fanout._authorize($1, 'consume');
    v_t := fanout._topic($1);
    IF $2 IS NULL OR $4 IS NULL THEN
        RAISE EXCEPTION 'message_id and after must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF $3 IS NULL OR $3 NOT IN ('inserted', 'deleted') THEN
        RAISE EXCEPTION 'side must be ''inserted'' or ''deleted'', not %', coalesce(quote_literal($3), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $4 < 0 THEN
        RAISE EXCEPTION 'after must be >= 0, not %', $4 USING ERRCODE = 'PGQ03';
    END IF;
    IF $5 IS NULL OR $5 NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'max_rows must be in 1..10000, not %', coalesce($5::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    RETURN QUERY
    SELECT k.first_row + e.i - 1, e.r::jsonb
    FROM fanout.capture_chunk k
    CROSS JOIN LATERAL json_array_elements(k.rows) WITH ORDINALITY AS e(r, i)
    WHERE k.topic_id = v_t.topic_id AND k.message_id = $2 AND k.side = $3
      AND k.first_row - $5 <= $4 AND k.first_row + k.n_rows - 1 > $4  -- (no $4 + $5: it may overflow)
      AND k.first_row + e.i - 1 > $4 AND k.first_row + e.i - 1 - $5 <= $4
    ORDER BY 1;
END
$fn$;
