-- fanout._ack(p_lease_id, p_ids, p_checked, p_defer, p_raw): fanout.ack's work
-- (see there), shared with read(..., ack =>), which passes p_checked: it has
-- checked the caller's consume grant on the lease's topic in the same call
-- (fanout._lock_lease does not check it again), and p_defer: when the ack settles
-- every message still open of a page from which nothing was taken (the
-- pipelined consumer's ack of its previous page), the slot row is not
-- written here but handed back (o_defer, its id, and o_targets,
-- the messages settled): the read puts its next page into that slot with
-- the same update (fanout._lease_open, p_settling), or settles it with
-- fanout._lease_settle when it opens no page there. The caller holds the
-- slot's lock meanwhile (taken here), so nobody sees the page between.
-- p_raw: the internal id of p_lease_id when the caller has decoded it
-- (read(..., ack =>)), passed on to fanout._lock_lease.
-- Returns how many messages were settled (o_n). Raises as fanout.ack.
-- Tables: as fanout.ack; fanout.group_tally (fanout._tally: the group's ack counter).
CREATE OR REPLACE FUNCTION fanout._ack(
    p_lease_id bigint, p_ids bigint[], p_checked boolean, p_defer boolean DEFAULT false,
    p_raw bigint DEFAULT NULL, OUT o_n int, OUT o_defer bigint, OUT o_targets bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_l       fanout.lease;
    v_targets bigint[];
    v_ref     boolean;
    v_seq     boolean;
BEGIN
    v_l := fanout._lock_lease(p_lease_id, p_checked, p_raw);
    v_targets := fanout._lease_targets(v_l, p_ids);
    o_n := cardinality(v_targets);
    IF o_n > 0 THEN
        -- Completion bits and sequence releases only where the topic has them.
        SELECT g.bit_no IS NOT NULL, t.sequence_ordering INTO v_ref, v_seq
        FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
        WHERE g.group_id = v_l.group_id;
        IF v_ref THEN
            PERFORM fanout._complete_bits(v_l.group_id, v_l.msg_ids, v_l.msg_txids, true, v_targets);
        END IF;
        IF v_seq THEN
            PERFORM fanout._sequence_settled(v_l.group_id, v_targets);
        END IF;
        IF p_defer AND p_ids IS NULL AND o_n = v_l.open_count AND v_l.reclaimed = '{}'
           AND v_l.page_no < 65535 THEN
            o_defer := v_l.lease_id;
            o_targets := v_targets;
        ELSE
            PERFORM fanout._lease_settle(v_l.lease_id, v_targets, false, true);
        END IF;
        PERFORM fanout._tally(v_l.group_id, v_l.slot_id, o_n, 0);
    END IF;
END
$fn$;
