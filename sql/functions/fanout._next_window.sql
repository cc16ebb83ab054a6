-- fanout._next_window(p_topic_id, p_bit, p_hi): the snapshot that ends a
-- group's next window, whose window so far ended at p_hi. It is
-- fanout._snapshot() (the caller's own transaction counted as running); in
-- reference mode (p_bit not NULL) stamps are reconciled first, and listed
-- transactions (fanout.stamp_pending) are held back, counted as running,
-- until their stamps are reconciled. The list is read after the snapshot, so
-- it holds every listed transaction the snapshot sees ended. Only those the
-- group has not passed (not visible in p_hi): holding back one it passed
-- would hand its messages out again. Shared by every page function, so the
-- rule lives in one place.
-- Tables: fanout.stamp_pending (and what fanout._reconcile_stamps touches).
CREATE OR REPLACE FUNCTION fanout._next_window(p_topic_id bigint, p_bit int, p_hi pg_snapshot)
RETURNS pg_snapshot
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_new    pg_snapshot := fanout._snapshot();
    v_listed xid8[];
BEGIN
    IF p_bit IS NOT NULL THEN
        PERFORM fanout._reconcile_stamps(p_topic_id, v_new);
        v_listed := ARRAY(SELECT DISTINCT s.txid FROM fanout.stamp_pending s
                          WHERE s.topic_id = p_topic_id AND NOT pg_visible_in_snapshot(s.txid, p_hi));
        IF cardinality(v_listed) > 0 THEN
            v_new := fanout._snapshot(v_new, v_listed);
        END IF;
    END IF;
    RETURN v_new;
END
$fn$;
