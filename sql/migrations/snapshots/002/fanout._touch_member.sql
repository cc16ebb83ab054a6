-- fanout._touch_member(p_group_id, p_consumer, p_now, p_strict, p_every):
-- records that a member of a group was seen, at most once per p_every
-- (default a second) per member so that thousands of members do not hammer
-- one row. (Partitioned reads pass a quarter of the assignment's liveness
-- window: an idle member of a member storm then writes every 7.5 s, not
-- every second; each such write is a commit waiting for the WAL flush.) When the row is fresh nothing
-- is locked or written (an upsert's ON CONFLICT DO UPDATE ... WHERE would
-- lock it). A group has at most 10,000 members (rows are kept 7 days after
-- the member was last seen): with p_strict a new consumer name beyond that
-- raises PGQ22 (read, heartbeat); without, it is simply not recorded (acks
-- must never fail for bookkeeping). Tables: fanout.member.
CREATE OR REPLACE FUNCTION fanout._touch_member(
    p_group_id bigint, p_consumer text, p_now timestamptz, p_strict boolean DEFAULT false,
    p_every interval DEFAULT interval '1 second')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_seen timestamptz;
BEGIN
    -- The common case, a known member seen within p_every: one look-up,
    -- no lock, no write.
    SELECT m.last_seen INTO v_seen FROM fanout.member m WHERE m.group_id = p_group_id AND m.consumer = p_consumer;
    IF FOUND THEN
        IF v_seen < p_now - p_every THEN
            UPDATE fanout.member m SET last_seen = p_now
            WHERE m.group_id = p_group_id AND m.consumer = p_consumer AND m.last_seen < p_now - p_every;
        END IF;
        RETURN;
    END IF;
    IF (SELECT count(*) FROM (SELECT 1 FROM fanout.member m WHERE m.group_id = p_group_id LIMIT 10000) x) >= 10000 THEN
        IF NOT p_strict THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'the group already has 10000 members; consumer % is one too many', quote_literal(p_consumer)
            USING ERRCODE = 'PGQ22', HINT = 'reuse consumer names (members are forgotten 7 days after they were last seen)';
    END IF;
    INSERT INTO fanout.member (group_id, consumer, last_seen) VALUES (p_group_id, p_consumer, p_now)
    ON CONFLICT (group_id, consumer) DO NOTHING;
END
$fn$;
