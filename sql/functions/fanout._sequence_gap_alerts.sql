-- fanout._sequence_gap_alerts(p_now): writes one fanout.event_log row (kind
-- 'sequence_gap', count = messages waiting behind it, detail: message_group,
-- missing_from, missing_to) for each gap of a sequence-ordered topic (see
-- fanout.sequence_gaps) whose aggregate's oldest waiting message has waited
-- longer than the topic's gap_alert_after, once per gap: seq_state.alerted_to
-- remembers the highest sequence reported. The pgq-scheduler sidecar counts
-- them in pgq_sequence_gap_alerts_total.
-- Bounded: at most 1,000 alerts per call. Returns how many it wrote; call
-- again while it returns > 0. Takes its own lock row (fanout._try_lock).
-- Tables: fanout.seq_wait, fanout.seq_state, fanout.consumer_group,
-- fanout.topic, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._sequence_gap_alerts(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET jit = off
AS $fn$
DECLARE
    r      record;
    v_done int := 0;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:sequence_gap_alerts') THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT x.group_id, x.message_group, x.seq - 1 AS missing_to, x.total - x.rn + 1 AS waiting,
               x.oldest AS oldest_parked, t.topic, g.group_name,
               coalesce(x.prev, s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END) + 1 AS missing_from
        FROM (SELECT w.group_id, w.message_group, w.seq, lag(w.seq) OVER a AS prev, row_number() OVER a AS rn,
                     count(*) OVER p AS total, min(w.parked_at) OVER p AS oldest
              FROM fanout.seq_wait w
              WINDOW p AS (PARTITION BY w.group_id, w.message_group),
                     a AS (PARTITION BY w.group_id, w.message_group ORDER BY w.seq)) x
        JOIN fanout.seq_state s ON s.group_id = x.group_id AND s.message_group = x.message_group
        JOIN fanout.consumer_group g ON g.group_id = x.group_id
        JOIN fanout.topic t ON t.topic_id = g.topic_id
        WHERE (x.prev IS NULL OR x.seq > x.prev + 1)
          AND x.seq > coalesce(x.prev, s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END) + 1
          AND x.seq - 1 > s.alerted_to
          AND p_now - x.oldest >= t.gap_alert_after
        ORDER BY x.group_id, x.message_group, x.seq
        LIMIT 1000
    LOOP
        -- Never waits for a consumer's read holding the aggregate's state
        -- (a tenant's transaction left open): its gap is reported by a
        -- later call.
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM fanout.seq_state s
                                  WHERE s.group_id = r.group_id AND s.message_group = r.message_group
                                  FOR UPDATE SKIP LOCKED);
        INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
        VALUES (r.topic, r.group_name, 'sequence_gap', r.waiting,
                jsonb_build_object('message_group', r.message_group, 'missing_from', r.missing_from,
                                   'missing_to', r.missing_to,
                                   'oldest_waiting_age', extract(epoch FROM p_now - r.oldest_parked)));
        UPDATE fanout.seq_state s SET alerted_to = greatest(s.alerted_to, r.missing_to)
        WHERE s.group_id = r.group_id AND s.message_group = r.message_group;
        v_done := v_done + 1;
    END LOOP;
    RETURN v_done;
END
$fn$;
