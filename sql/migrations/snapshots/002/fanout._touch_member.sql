-- fanout._touch_member(p_group_id, p_consumer, p_now): records that a member
-- of a group was seen, at most once every 5 seconds per member so that
-- thousands of members do not hammer one row. Tables: fanout.member.
CREATE OR REPLACE FUNCTION fanout._touch_member(p_group_id bigint, p_consumer text, p_now timestamptz)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    INSERT INTO fanout.member AS m (group_id, consumer, last_seen)
    VALUES (p_group_id, p_consumer, p_now)
    ON CONFLICT (group_id, consumer) DO UPDATE SET last_seen = excluded.last_seen
    WHERE m.last_seen < excluded.last_seen - interval '5 seconds'
$fn$;
