-- fanout._kpart_cursors(p_topic_id, p_group_id): creates the missing
-- per-partition cursors (fanout.kpart rows) of one group (p_group_id), or of
-- every group of the topic (p_group_id NULL), for partitions 0 .. P - 1 of
-- the topic as it is now; each starts at its group's position (the group
-- row's window, which never moves on a partitioned topic). Called where
-- groups and partitions come into being: fanout.subscribe and
-- fanout.create_topic (a queue's implicit group) after inserting the group
-- row, fanout.alter_topic after raising P. Reads never insert cursors.
-- P is read here, after the caller's group insert: the insert's foreign key
-- waited for an alter_topic holding the topic row, so a group and a raise of
-- P that race both end with every cursor. No-op on an unpartitioned topic.
-- Returns the number of cursors created. Tables: fanout.kpart (insert),
-- fanout.topic, fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._kpart_cursors(p_topic_id bigint, p_group_id bigint)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    INSERT INTO fanout.kpart (group_id, kpart, win_lo, win_hi, cur_txid, cur_id)
    SELECT g.group_id, s, g.win_lo, g.win_hi, g.cur_txid, g.cur_id
    FROM fanout.topic t
    JOIN fanout.consumer_group g ON g.topic_id = t.topic_id
    CROSS JOIN LATERAL generate_series(0, t.partitions - 1) AS s
    WHERE t.topic_id = p_topic_id AND t.partitions IS NOT NULL
      AND (p_group_id IS NULL OR g.group_id = p_group_id)
    ORDER BY g.group_id, s
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
