-- fanout._kpart_mode(p_t, p_group_id, p_explicit, p_now): sets how a group of a
-- partitioned topic reads: 'explicit' (read(..., partition => k): the
-- application assigns partitions) or automatic assignment
-- (fanout._kpart_assign). NULL means automatic too: automatic reads never
-- set the mode, so a member storm's reads never touch the group row; this
-- is called only to go explicit, or for an automatic read of an explicit
-- group. Switching is refused (PGQ24: mixing the two in one group) while the
-- group has an open, unexpired lease, or the other mode was used within
-- least(heartbeat_timeout, 30 seconds): a live automatic owner, or an
-- explicit read (also one that handed out nothing: fanout._kpart_read
-- records the attempt). A switch to explicit frees every partition (generation
-- bumped). Decided under the group row's lock. (An explicit read racing
-- the first automatic reads of a group may pass before their claims
-- commit; their next read is refused. One page per partition at a time
-- holds in any case: it is the partition row's rule, not the mode's.)
-- Tables: fanout.consumer_group, fanout.kpart, fanout.member, fanout.lease.
CREATE OR REPLACE FUNCTION fanout._kpart_mode(
    p_t fanout.topic, p_group_id bigint, p_explicit boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g    fanout.consumer_group;
    v_want text := CASE WHEN p_explicit THEN 'explicit' ELSE 'auto' END;
    v_live interval;
BEGIN
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id FOR NO KEY UPDATE;
    IF v_g.kpart_mode IS NOT DISTINCT FROM v_want THEN
        RETURN;
    END IF;
    v_live := least(v_g.heartbeat_timeout, interval '30 seconds');
    IF v_want = 'auto' AND v_g.kpart_mode IS NULL THEN
        RETURN;
    END IF;
    IF (EXISTS (SELECT 1 FROM fanout.lease l
                    WHERE l.group_id = p_group_id AND l.open_count > 0 AND l.expires_at > p_now)
            OR (coalesce(v_g.kpart_mode, 'auto') = 'auto'
                AND EXISTS (SELECT 1 FROM fanout.kpart k JOIN fanout.member m
                              ON m.group_id = k.group_id AND m.consumer = k.owner
                            WHERE k.group_id = p_group_id AND p_now - m.last_seen <= v_live))
            OR (v_g.kpart_mode = 'explicit'
                AND EXISTS (SELECT 1 FROM fanout.kpart k
                            WHERE k.group_id = p_group_id AND p_now - k.last_read_at <= v_live))) THEN
        RAISE EXCEPTION 'group % of topic % reads its partitions %; % is refused while it does',
            coalesce(quote_literal(v_g.group_name), '(queue)'), quote_literal(p_t.topic),
            CASE WHEN coalesce(v_g.kpart_mode, 'auto') = 'auto' THEN 'by automatic assignment' ELSE 'explicitly (partition => k)' END,
            CASE WHEN p_explicit THEN 'read(..., partition => k)' ELSE 'a read without partition' END
            USING ERRCODE = 'PGQ24',
                  HINT = 'use one mode per group (another group for the other), or switch once the group has '
                         'no open lease and the other mode has been idle for least(heartbeat_timeout, 30 s)';
    END IF;
    UPDATE fanout.consumer_group g SET kpart_mode = v_want WHERE g.group_id = p_group_id;
    IF p_explicit THEN
        UPDATE fanout.kpart k SET owner = NULL, generation = k.generation + 1, owned_at = p_now
        WHERE k.group_id = p_group_id AND k.owner IS NOT NULL;
    END IF;
END
$fn$;
