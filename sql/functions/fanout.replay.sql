-- fanout.replay(topic, group_name, message_ids): hands already-delivered
-- (or skipped by seek: what the group's cursor passed), retained messages to
-- the group again, by explicit ids only (no filter: no
-- injection surface). They are served as due retries by the next read
-- (attempt counting from 1 again); acking them again is harmless, also in
-- reference mode (a COMPLETED message stays as it is). Ids under an open
-- lease of the group or already waiting for a retry are left as they are.
-- Sequence-ordered topics: in order. A replayed message below its
-- aggregate's turn is handed out again at once (acking it changes nothing);
-- at its turn it becomes the aggregate's current message, so its ack
-- releases the next sequence (also after seek released it or skipped it);
-- above its turn it waits for its predecessors (fanout.seq_wait).
-- On queue topics group_name is ignored. Recorded in fanout.event_log.
-- Returns how many messages were queued for replay.
-- Raises: PGQ01, PGQ03 (NULL array or element; an id the group has not been
-- handed yet: its cursor has not passed it, or on a sequence-ordered topic it
-- waits for its sequence's turn), PGQ13, PGQ14, PGQ16 (cancelled
-- group), PGQ18 (not retained: never existed or its partition was dropped).
-- Tables: fanout.topic, fanout.consumer_group, fanout.kpart, fanout.lease, fanout.retry,
-- fanout.seq_wait, fanout.seq_state, fanout.event_log, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout.replay(topic text, group_name text, message_ids bigint[])
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_g       fanout.consumer_group;
    v_t       fanout.topic;
    v_found   record;
    v_bad     bigint[];
    v_n       int;
    v_parked  bigint[] := '{}';
BEGIN
    IF $3 IS NULL OR array_position($3, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message_ids must be an array of ids without NULLs' USING ERRCODE = 'PGQ03';
    END IF;
    v_g := fanout._group_for_admin($1, $2);
    IF v_g.status = 'cancelled' THEN
        RAISE EXCEPTION 'group % of topic % is cancelled', quote_literal($2), quote_literal($1)
            USING ERRCODE = 'PGQ16';
    END IF;
    SELECT * INTO STRICT v_t FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    -- Retained ones, with their txids, and whether the group was handed them:
    -- visible in its window's lo, or in the window and at or before its cursor.
    -- On a partitioned topic, at the position of the message's key partition.
    EXECUTE format(
        'SELECT array_agg(m.id) AS ids, array_agg(m.txid) AS txids,
                array_agg(m.id) FILTER (WHERE NOT (pg_visible_in_snapshot(m.txid, p.lo)
                    OR (pg_visible_in_snapshot(m.txid, p.hi) AND (m.txid, m.id) <= (p.ctx, p.cid)))) AS ahead
         FROM fanout_data.%I m
         CROSS JOIN LATERAL (SELECT coalesce(k.win_lo, $2) AS lo, coalesce(k.win_hi, $3) AS hi,
                                    coalesce(k.cur_txid, $4) AS ctx, coalesce(k.cur_id, $5) AS cid
                             FROM (SELECT 1) one
                             LEFT JOIN fanout.kpart k ON k.group_id = $6 AND k.kpart = %s) p
         WHERE m.id = ANY ($1)', v_t.data_table, CASE WHEN v_t.partitions IS NULL THEN 'NULL' ELSE 'm.kpart' END)
        INTO v_found USING $3, v_g.win_lo, v_g.win_hi, v_g.cur_txid, v_g.cur_id, v_g.group_id;
    v_bad := ARRAY(SELECT DISTINCT x FROM unnest($3) AS x WHERE x <> ALL (coalesce(v_found.ids, '{}')) ORDER BY x);
    IF cardinality(v_bad) > 0 THEN
        RAISE EXCEPTION 'message(s) % are not retained in topic %', array_to_string(v_bad, ', '), quote_literal($1)
            USING ERRCODE = 'PGQ18';
    END IF;
    IF v_found.ahead IS NOT NULL THEN
        RAISE EXCEPTION 'message(s) % have not been handed to this group yet', array_to_string(v_found.ahead, ', ')
            USING ERRCODE = 'PGQ03', HINT = 'replay re-delivers what the group already got; the rest comes anyway';
    END IF;
    IF v_t.sequence_ordering THEN
        -- Passed by the cursor but parked until their sequence's turn: not
        -- handed out either (replaying one handed it out before its
        -- predecessors, and again when its turn came).
        v_bad := ARRAY(SELECT w.message_id FROM fanout.seq_wait w
                       WHERE w.group_id = v_g.group_id AND w.message_id = ANY ($3) ORDER BY w.message_id);
        IF cardinality(v_bad) > 0 THEN
            RAISE EXCEPTION 'message(s) % have not been handed to this group yet: they wait for their sequence''s turn',
                array_to_string(v_bad, ', ')
                USING ERRCODE = 'PGQ03', HINT = 'see fanout.sequence_gaps; they come once every lower sequence is acked or dead-lettered';
        END IF;
    END IF;
    IF v_t.sequence_ordering THEN
        -- Above its aggregate's turn: it waits for its predecessors like a
        -- message the gate parks (fanout._sequence_gate), so that replaying
        -- several sequences of one aggregate hands them out in order, each
        -- once the one before is acked.
        EXECUTE format(
            'WITH parked AS (
                 INSERT INTO fanout.seq_wait (group_id, message_group, seq, message_id, txid, parked_at)
                 SELECT $1, m.message_group, m.seq, m.id, m.txid, clock_timestamp()
                 FROM fanout_data.%I m
                 LEFT JOIN fanout.seq_state s ON s.group_id = $1 AND s.message_group = m.message_group
                 WHERE m.id = ANY ($2) AND m.seq > coalesce(s.next_seq, 1)
                 ON CONFLICT DO NOTHING
                 RETURNING message_id)
             SELECT coalesce(array_agg(parked.message_id), ''{}'') FROM parked', v_t.data_table)
            INTO v_parked USING v_g.group_id, v_found.ids;
    END IF;
    INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, last_error)
    SELECT v_g.group_id, u.id, u.tx, 0, clock_timestamp(), 'replayed'
    FROM unnest(v_found.ids, v_found.txids) AS u(id, tx)
    WHERE u.id <> ALL (v_parked)
      AND NOT EXISTS (SELECT 1 FROM fanout.lease l
                      WHERE l.group_id = v_g.group_id AND l.open_count > 0 AND u.id = ANY (l.msg_ids)
                        AND u.id <> ALL (l.settled) AND u.id <> ALL (l.reclaimed))
    ON CONFLICT (group_id, message_id) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_n := v_n + cardinality(v_parked);
    IF v_t.sequence_ordering THEN
        -- A replayed message at its aggregate's turn (next_seq) becomes the
        -- aggregate's current message, as if the gate had handed it out, so
        -- that its ack or dead letter releases the successor. After
        -- seek('latest') released it (or skipped it unread) nothing else
        -- would: the successor waited for it forever.
        EXECUTE format(
            'INSERT INTO fanout.seq_state (group_id, message_group, msg_id)
             SELECT $1, m.message_group, m.id FROM fanout_data.%I m WHERE m.id = ANY ($2) AND m.seq = 1
             ON CONFLICT DO NOTHING', v_t.data_table)
            USING v_g.group_id, v_found.ids;
        EXECUTE format(
            'UPDATE fanout.seq_state s SET msg_id = m.id
             FROM fanout_data.%I m
             WHERE m.id = ANY ($2) AND s.group_id = $1 AND s.message_group = m.message_group
               AND s.next_seq = m.seq AND s.msg_id IS NULL', v_t.data_table)
            USING v_g.group_id, v_found.ids;
    END IF;
    INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
    VALUES (v_t.topic, v_g.group_name, 'replay', v_n, jsonb_build_object('message_ids', $3));
    RETURN v_n;
END
$fn$;
