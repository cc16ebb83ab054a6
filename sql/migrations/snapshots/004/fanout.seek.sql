-- fanout.seek(topic, group_name, start_position, start_at, start_message_id):
-- moves an existing group's cursor (latest, earliest, timestamp or
-- message_id; no max_backfill cap: seeking is explicit). Clears the group's
-- leases (their holders' acks then raise PGQ11) and pending retries. On
-- queue topics group_name is ignored and the topic's one group moves. In
-- reference mode the group gets again what requires it from there (COMPLETED
-- messages included, read-only: acking them again changes nothing), and a
-- backfill sets its bit on the messages from there that are not COMPLETED.
-- Returns the first retained message id the group will get (NULL for latest
-- or when there is none).
-- Raises: PGQ01, PGQ03 (bad position or arguments, beyond the end), PGQ13,
-- PGQ14, PGQ16 (cancelled group).
-- Tables: fanout.consumer_group, fanout.lease, fanout.retry, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.seek(
    topic            text,
    group_name       text,
    start_position   text,
    start_at         timestamptz DEFAULT NULL,
    start_message_id bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
    v_g fanout.consumer_group;
    v_s record;
BEGIN
    v_g := fanout._group_for_admin($1, $2);
    SELECT * INTO STRICT v_t FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    IF v_g.status = 'cancelled' THEN
        RAISE EXCEPTION 'group % of topic % is cancelled', quote_literal($2), quote_literal($1)
            USING ERRCODE = 'PGQ16';
    END IF;
    v_s := fanout._start_state(v_t, $3, $4, $5, NULL);
    PERFORM fanout._release_holds(v_g.group_id);
    UPDATE fanout.consumer_group g
    SET win_lo = v_s.o_lo, win_hi = v_s.o_hi, cur_txid = '0', cur_id = 0,
        prio_level = NULL, prio_txid = NULL, prio_id = NULL,
        effective_start_id = v_s.o_start_id, start_position = fanout._normalize_option('start_position', $3)
    WHERE g.group_id = v_g.group_id;
    -- Partitioned topic: every key partition's cursor (its priority level
    -- cursor included) restarts there too
    -- (its page was released above, and counts as settled; owners are
    -- assigned afresh). lease_id stays: a page whose ack was in flight when
    -- it was to be released was left to that ack (fanout._release_holds),
    -- and the partition waits for it as for any page out.
    UPDATE fanout.kpart k
    SET win_lo = v_s.o_lo, win_hi = v_s.o_hi, cur_txid = '0', cur_id = 0,
        prio_level = NULL, prio_txid = NULL, prio_id = NULL,
        owner = NULL, generation = k.generation + 1, owned_at = now()
    WHERE k.group_id = v_g.group_id;
    IF v_g.bit_no IS NOT NULL AND fanout._normalize_option('start_position', $3) <> 'latest' THEN
        -- Reference mode: re-deliver from there means requiring the group again
        -- on the messages from there that are not COMPLETED.
        PERFORM fanout._start_bitmap_job(v_g.group_id, 'backfill', v_s.o_start_id, 10000, 'all_retained');
    END IF;
    INSERT INTO fanout.event_log (topic, group_name, kind, detail)
    VALUES (v_t.topic, v_g.group_name, 'seek', jsonb_build_object('start_position', $3,
            'effective_start_message_id', v_s.o_effective_start_id));
    RETURN v_s.o_effective_start_id;
END
$fn$;
