-- fanout._touch_member(p_group_id, p_consumer, p_now): records that a member
-- of a group was seen, at most once a second per member so that
-- thousands of members do not hammer one row. When the row is fresh nothing
-- is locked or written (an upsert's ON CONFLICT DO UPDATE ... WHERE would
-- lock it). Tables: fanout.member.
CREATE OR REPLACE FUNCTION fanout._touch_member(p_group_id bigint, p_consumer text, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    UPDATE fanout.member m SET last_seen = p_now
    WHERE m.group_id = p_group_id AND m.consumer = p_consumer AND m.last_seen < p_now - interval '1 second';
    IF NOT FOUND THEN
        INSERT INTO fanout.member (group_id, consumer, last_seen) VALUES (p_group_id, p_consumer, p_now)
        ON CONFLICT (group_id, consumer) DO NOTHING;
    END IF;
END
$fn$;
