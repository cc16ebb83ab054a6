-- fanout._kpart_assign(p_t, p_g, p_consumer, p_now): the key partitions member
-- p_consumer of group p_g owns after one incremental assignment step, taken
-- on each of its reads (automatic mode).
-- Live members are those seen (read, heartbeat, ack) within
-- least(heartbeat_timeout, 30 seconds). With n live members and P
-- partitions, the member of rank r (by name) is due P / n partitions, plus
-- one when r < P mod n: at most ceil(P / n). A member over its share
-- releases partitions whose page is settled (no open lease, no nacked
-- message waiting); a member under it claims free partitions, partitions
-- whose owner is no longer live, partitions whose owner's page lease
-- expired (its messages then come to the new owner: fencing), and settled
-- partitions (as for a release) of a member holding more than ceil(P / n),
-- which is over its share whatever its rank. Rows are
-- taken FOR UPDATE SKIP LOCKED, so members never wait for each other.
-- Every ownership change bumps the partition's generation.
-- Cost: a member whose share it already holds (the steady state) reads its
-- own partitions (fanout.kpart by owner) and counts live members; when P
-- live members rank before it (more members than partitions: its share is
-- 0) it counts only those P, and a member that owns nothing then returns
-- at once. Nothing is locked or written unless a partition moves, and only
-- the moving rows are locked (picked first, then updated by key: a locking
-- subquery inside the UPDATE was re-run for every row of the group).
-- Tables: fanout.kpart, fanout.member, fanout.lease, fanout.retry.
CREATE OR REPLACE FUNCTION fanout._kpart_assign(
    p_t fanout.topic, p_g fanout.consumer_group, p_consumer text, p_now timestamptz)
RETURNS int[]
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_seen    timestamptz := p_now - least(p_g.heartbeat_timeout, interval '30 seconds');
    v_mine    int[];
    v_below   int;
    v_n       int;
    v_self    int;
    v_target  int;
    v_moved   int[];
    v_over    text[];
BEGIN
    v_mine := ARRAY(SELECT k.kpart FROM fanout.kpart k
                    WHERE k.group_id = p_g.group_id AND k.owner = p_consumer ORDER BY k.kpart);
    -- The member's rank: live members named before it, counted up to P.
    SELECT count(*) INTO v_below
    FROM (SELECT 1 FROM fanout.member m
          WHERE m.group_id = p_g.group_id AND m.consumer < p_consumer AND m.last_seen >= v_seen
          LIMIT p_t.partitions) x;
    IF v_below >= p_t.partitions THEN
        v_target := 0;  -- P live members come first: none left for this one
        IF cardinality(v_mine) = 0 THEN
            RETURN v_mine;  -- an idle member: nothing to claim, nothing to release
        END IF;
    ELSE
        SELECT count(*), count(*) FILTER (WHERE m.consumer = p_consumer) INTO v_n, v_self
        FROM fanout.member m
        WHERE m.group_id = p_g.group_id AND m.last_seen >= v_seen;
        v_n := v_n + CASE WHEN v_self = 0 THEN 1 ELSE 0 END;  -- not recorded (member limit) or clock skew
        v_target := p_t.partitions / v_n + CASE WHEN v_below < p_t.partitions % v_n THEN 1 ELSE 0 END;
    END IF;

    IF cardinality(v_mine) > v_target THEN
        v_moved := ARRAY(SELECT x.kpart FROM fanout.kpart x
                         WHERE x.group_id = p_g.group_id AND x.owner = p_consumer
                           AND NOT EXISTS (SELECT 1 FROM fanout.lease l
                                           WHERE l.slot_id = x.lease_id >> 32 AND l.lease_id = x.lease_id AND l.open_count > 0)
                           AND NOT EXISTS (SELECT 1 FROM fanout.retry r
                                           WHERE r.group_id = x.group_id AND r.kpart = x.kpart AND r.attempt > 0)
                         ORDER BY x.kpart DESC
                         LIMIT cardinality(v_mine) - v_target
                         FOR UPDATE SKIP LOCKED);
        IF cardinality(v_moved) > 0 THEN
            UPDATE fanout.kpart k
            SET owner = NULL, generation = k.generation + 1, owned_at = p_now
            WHERE k.group_id = p_g.group_id AND k.kpart = ANY (v_moved);
            v_mine := ARRAY(SELECT u FROM unnest(v_mine) AS u WHERE u <> ALL (v_moved) ORDER BY u);
        END IF;
    ELSIF cardinality(v_mine) < v_target THEN
        -- Members holding more than anyone's share (ceil(P / n)): their
        -- settled partitions may be taken without waiting for them to
        -- release (a member that started alone holds every partition until
        -- its next read, which in a storm of first reads comes late).
        v_over := ARRAY(SELECT k.owner FROM fanout.kpart k
                        WHERE k.group_id = p_g.group_id AND k.owner IS NOT NULL
                        GROUP BY k.owner
                        HAVING count(*) > (p_t.partitions + v_n - 1) / v_n);
        v_moved := ARRAY(SELECT x.kpart FROM fanout.kpart x
                         WHERE x.group_id = p_g.group_id AND x.owner IS DISTINCT FROM p_consumer
                           AND (x.owner IS NULL
                                OR NOT EXISTS (SELECT 1 FROM fanout.member m
                                               WHERE m.group_id = x.group_id AND m.consumer = x.owner
                                                 AND m.last_seen >= v_seen)
                                OR EXISTS (SELECT 1 FROM fanout.lease l
                                           WHERE l.slot_id = x.lease_id >> 32 AND l.lease_id = x.lease_id AND l.open_count > 0
                                             AND l.expires_at <= p_now)
                                OR (x.owner = ANY (v_over)
                                    AND NOT EXISTS (SELECT 1 FROM fanout.lease l
                                                    WHERE l.slot_id = x.lease_id >> 32 AND l.lease_id = x.lease_id AND l.open_count > 0)
                                    AND NOT EXISTS (SELECT 1 FROM fanout.retry r
                                                    WHERE r.group_id = x.group_id AND r.kpart = x.kpart
                                                      AND r.attempt > 0)))
                         ORDER BY x.owner IS NULL DESC, x.kpart
                         LIMIT v_target - cardinality(v_mine)
                         FOR UPDATE SKIP LOCKED);
        IF cardinality(v_moved) > 0 THEN
            UPDATE fanout.kpart k
            SET owner = p_consumer, generation = k.generation + 1, owned_at = p_now
            WHERE k.group_id = p_g.group_id AND k.kpart = ANY (v_moved);
            v_mine := ARRAY(SELECT u FROM unnest(v_mine || v_moved) AS u ORDER BY u);
        END IF;
    END IF;
    RETURN v_mine;
END
$fn$;
