-- fanout._kpart_assign(p_t, p_g, p_consumer, p_now): the key partitions member
-- p_consumer of group p_g owns after one incremental assignment step, taken
-- on each of its reads (automatic mode).
-- Live members are those seen (read, heartbeat, ack) within
-- least(heartbeat_timeout, 30 seconds). With n live members and P
-- partitions, the member of rank r (by name) is due P / n partitions, plus
-- one when r < P mod n: at most ceil(P / n). A member over its share
-- releases partitions whose page is settled (no open lease, no nacked
-- message waiting); a member under it claims free partitions, partitions
-- whose owner is no longer live, and partitions whose owner's page lease
-- expired (its messages then come to the new owner: fencing). Rows are
-- taken FOR UPDATE SKIP LOCKED, so members never wait for each other.
-- Every ownership change bumps the partition's generation.
-- Tables: fanout.kpart, fanout.member, fanout.lease, fanout.retry.
CREATE OR REPLACE FUNCTION fanout._kpart_assign(
    p_t fanout.topic, p_g fanout.consumer_group, p_consumer text, p_now timestamptz)
RETURNS int[]
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_members text[];
    v_n       int;
    v_rank    int;
    v_target  int;
    v_mine    int;
BEGIN
    v_members := ARRAY(SELECT m.consumer FROM fanout.member m
                       WHERE m.group_id = p_g.group_id
                         AND p_now - m.last_seen <= least(p_g.heartbeat_timeout, interval '30 seconds')
                       ORDER BY m.consumer);
    IF NOT p_consumer = ANY (v_members) THEN
        v_members := v_members || p_consumer;  -- not recorded (member limit) or clock skew
    END IF;
    v_n := cardinality(v_members);
    v_rank := array_position(v_members, p_consumer) - 1;
    v_target := p_t.partitions / v_n + CASE WHEN v_rank < p_t.partitions % v_n THEN 1 ELSE 0 END;
    SELECT count(*) INTO v_mine FROM fanout.kpart k WHERE k.group_id = p_g.group_id AND k.owner = p_consumer;

    IF v_mine > v_target THEN
        UPDATE fanout.kpart k
        SET owner = NULL, generation = k.generation + 1, owned_at = p_now
        WHERE k.group_id = p_g.group_id
          AND k.kpart IN (SELECT x.kpart FROM fanout.kpart x
                          WHERE x.group_id = p_g.group_id AND x.owner = p_consumer
                            AND NOT EXISTS (SELECT 1 FROM fanout.lease l
                                            WHERE l.slot_id = x.lease_id >> 32 AND l.lease_id = x.lease_id AND l.open_count > 0)
                            AND NOT EXISTS (SELECT 1 FROM fanout.retry r
                                            WHERE r.group_id = x.group_id AND r.kpart = x.kpart AND r.attempt > 0)
                          ORDER BY x.kpart DESC
                          LIMIT v_mine - v_target
                          FOR UPDATE SKIP LOCKED)
          AND k.owner = p_consumer;
    ELSIF v_mine < v_target THEN
        UPDATE fanout.kpart k
        SET owner = p_consumer, generation = k.generation + 1, owned_at = p_now
        WHERE k.group_id = p_g.group_id
          AND k.kpart IN (SELECT x.kpart FROM fanout.kpart x
                          WHERE x.group_id = p_g.group_id AND x.owner IS DISTINCT FROM p_consumer
                            AND (x.owner IS NULL OR x.owner <> ALL (v_members)
                                 OR EXISTS (SELECT 1 FROM fanout.lease l
                                            WHERE l.slot_id = x.lease_id >> 32 AND l.lease_id = x.lease_id AND l.open_count > 0
                                              AND l.expires_at <= p_now))
                          ORDER BY x.owner IS NULL DESC, x.kpart
                          LIMIT v_target - v_mine
                          FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN ARRAY(SELECT k.kpart FROM fanout.kpart k WHERE k.group_id = p_g.group_id AND k.owner = p_consumer);
END
$fn$;
