-- View fanout.captures: one row per captured table (fanout.capture_table):
-- the table, its topic, the key, the columns of the images (NULL: all) and
-- those excluded, who captured it and when, the shape ('row' or
-- 'statement') and the statement shape's claim-check threshold. Shows only captures into topics
-- the caller has some grant on (fanout._may); a security barrier.
-- Tables: fanout.capture, pg_trigger.
CREATE OR REPLACE VIEW fanout.captures WITH (security_barrier) AS
SELECT c.capture_id, tg.tgrelid::regclass AS table_name, c.topic, c.key_columns, c.columns, c.exclude_columns,
       c.created_by, c.created_at, c.shape, c.claim_check_rows
FROM fanout.capture c
JOIN pg_trigger tg ON tg.tgname = 'fanout_capture_ins'
                  AND split_part(encode(tg.tgargs, 'escape'), '\000', 1) = c.capture_id::text
WHERE fanout._may(c.topic, 'any');
