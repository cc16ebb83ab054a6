-- fanout._cleanup_bookkeeping(p_now): deletes lease slots whose last page
-- closed over an hour ago (no read reused them since; an ack of any of their
-- pages then raises PGQ10; a page taken over by another member: 7 days and
-- an hour, the longest its messages can be held), members not seen for
-- 7 days, captures whose triggers are gone (a dropped table; after an
-- hour) with their generated trigger functions, claim-check chunks of capture
-- messages whose storage is gone (fanout._capture_release_chunks), event_log
-- rows older than 30 days and dedupe keys older than
-- their topic's dedupe_window: those are found by a sweep over each
-- topic's fanout_data.m<id>_dedupe in block ranges (it has no index on
-- created_at), 100 blocks per call, one pass over the topics at a time (see
-- fanout.dedupe_sweep for the pace). Bounded: at most 10,000 rows of each
-- other kind, 100 dedupe blocks and 100 topics passed per call, and no
-- topic passed after 250 ms (sizing a topic's table opens it: a lock held
-- to the end of the call and a look at its file; 1,000 topics a call took
-- a second on a loaded machine); never
-- waits (a topic whose row an alter or a drop holds is passed by, its keys
-- left to the next pass, as is a key a publisher holds; a lease
-- slot or member row another transaction holds to a later call). Returns
-- how many rows were deleted plus how many dedupe blocks were swept and
-- topics passed; call again while it returns > 0. Takes its own lock
-- row (fanout._try_lock).
-- Tables: fanout.lease, fanout.capture (captures whose triggers are gone), fanout.capture_chunk, fanout.member, fanout.event_log,
-- fanout_data.m<topic_id>_dedupe, fanout.dedupe_sweep, fanout.topic (key
-- share lock on the swept topic's row), fanout.seq_published.
CREATE OR REPLACE FUNCTION fanout._cleanup_bookkeeping(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n       int;
    v_done    int := 0;
    v_sweep   fanout.dedupe_sweep;
    v_hi      bigint;
    v_i       int;
    v_table   text;
    v_window  interval;
    v_gone    text[];
    v_fn      regprocedure;
    v_start   timestamptz := clock_timestamp();
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:cleanup_bookkeeping') THEN
        RETURN 0;
    END IF;
    -- The outer conditions again: a read may have reused the slot for a new
    -- page meanwhile (they are re-checked on the row's latest version).
    -- A slot whose last page was taken over (reclaimed) stays as long as a
    -- lease can live (7 days) and an hour: its stale holder's ack must meet
    -- PGQ11 (roll back), not PGQ10, while the taker may still hold the
    -- messages.
    DELETE FROM fanout.lease l
    WHERE l.slot_id IN (SELECT c.slot_id FROM fanout.lease c
                        WHERE c.open_count = 0
                          AND c.closed_at < p_now - CASE WHEN cardinality(c.reclaimed) > 0
                                                         THEN interval '7 days 1 hour' ELSE interval '1 hour' END
                        LIMIT 10000
                        FOR UPDATE SKIP LOCKED)  -- never waits for a tenant (e.g. a drop_topic left open)
      AND l.open_count = 0
      AND l.closed_at < p_now - CASE WHEN cardinality(l.reclaimed) > 0
                                     THEN interval '7 days 1 hour' ELSE interval '1 hour' END;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    -- Sequences recorded as dropped (fanout.seq_lost) that their aggregate
    -- has passed.
    DELETE FROM fanout.seq_lost x
    WHERE (x.group_id, x.message_group, x.seq) IN (
        SELECT o.group_id, o.message_group, o.seq FROM fanout.seq_lost o
        JOIN fanout.seq_state s ON s.group_id = o.group_id AND s.message_group = o.message_group
        WHERE o.seq < s.next_seq LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    -- Captures whose triggers are gone (the table was dropped), and their
    -- generated trigger functions (unless a trigger still runs one).
    WITH gone AS (
        DELETE FROM fanout.capture c
        WHERE c.created_at < p_now - interval '1 hour'
          AND NOT EXISTS (SELECT 1 FROM pg_trigger tg
                          WHERE tg.tgname = 'fanout_capture_ins'
                            AND split_part(encode(tg.tgargs, 'escape'), '\000', 1) = c.capture_id::text)
        RETURNING c.capture_id)
    SELECT array_agg('capture_' || gone.capture_id) INTO v_gone FROM gone;
    v_done := v_done + coalesce(cardinality(v_gone), 0);
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'fanout_data'::regnamespace AND p.proname = ANY (v_gone)
          AND NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgfoid = p.oid)
    LOOP
        EXECUTE format('DROP FUNCTION %s', v_fn);
    END LOOP;
    v_done := v_done + fanout._capture_release_chunks(10000);
    DELETE FROM fanout.member m
    WHERE (m.group_id, m.consumer) IN (SELECT o.group_id, o.consumer FROM fanout.member o
                                       WHERE o.last_seen < p_now - interval '7 days' LIMIT 10000
                                       FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    DELETE FROM fanout.event_log e
    WHERE e.event_id IN (SELECT o.event_id FROM fanout.event_log o
                         WHERE o.at < p_now - interval '30 days' LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    -- Dedupe keys past their topic's window (a key is free again then; a
    -- publisher taking one over meanwhile made it new, which the DELETE
    -- re-checks on the row's latest version).
    SELECT * INTO STRICT v_sweep FROM fanout.dedupe_sweep;
    IF v_sweep.next_block IS NULL
       AND (v_sweep.pass_started IS NULL OR v_sweep.pass_started > p_now
            OR v_sweep.pass_started <= p_now - (
                SELECT greatest(interval '1 minute', least(min(t.dedupe_window) / 8, interval '1 hour'))
                FROM fanout.topic t)) THEN
        -- A new pass, from the first topic on.
        v_sweep.topic_id := 0;
        v_sweep.next_block := 0;
        v_sweep.pass_end := 0;
        v_sweep.pass_started := p_now;
    END IF;
    IF v_sweep.next_block IS NOT NULL THEN
        -- Past the blocks of this topic's table: on to the next topic's (the
        -- blocks there now), at most 100 topics per call and none after
        -- 250 ms. A topic's row is
        -- locked (key share) before its table is opened, without waiting:
        -- a topic whose row is taken (an alter or a drop in flight, maybe
        -- left open by a tenant) is passed by until the next pass, as is a
        -- dropped one.
        FOR v_i IN 1 .. 100 LOOP
            EXIT WHEN v_i > 1 AND clock_timestamp() - v_start > interval '250 ms';
            IF v_sweep.pass_end IS NULL THEN  -- the table not sized yet
                SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic_id = v_sweep.topic_id
                FOR KEY SHARE SKIP LOCKED;
                IF FOUND THEN
                    v_sweep.pass_end := coalesce(pg_relation_size(to_regclass(
                                            format('fanout_data.%I', v_table || '_dedupe'))), 0)
                                        / current_setting('block_size')::bigint;
                ELSE
                    -- Dropped, or taken: passed by. A taken topic's keys
                    -- wait for the next pass; stopping here let one
                    -- tenant's open alter or drop stop the sweep of every
                    -- topic after it for as long as it stayed open.
                    v_sweep.pass_end := 0;
                END IF;
            END IF;
            EXIT WHEN v_sweep.next_block < v_sweep.pass_end;
            v_done := v_done + 1;
            SELECT t.topic_id INTO v_sweep.topic_id
            FROM fanout.topic t WHERE t.topic_id > v_sweep.topic_id ORDER BY t.topic_id LIMIT 1;
            IF NOT FOUND THEN
                v_sweep.topic_id := NULL;  -- the pass is over
                EXIT;
            END IF;
            v_sweep.next_block := 0;
            v_sweep.pass_end := NULL;
        END LOOP;
        IF v_sweep.topic_id IS NOT NULL AND v_sweep.next_block < v_sweep.pass_end THEN
            v_hi := least(v_sweep.next_block + 100, v_sweep.pass_end);
            SELECT t.data_table, t.dedupe_window INTO v_table, v_window
            FROM fanout.topic t WHERE t.topic_id = v_sweep.topic_id
            FOR KEY SHARE SKIP LOCKED;
            IF FOUND THEN
                -- Rows a publisher holds (taking an expired key over) are
                -- left to the next pass: the sweep never waits for one.
                EXECUTE format($q$
                    DELETE FROM fanout_data.%1$I d
                    WHERE d.ctid = ANY (ARRAY(SELECT o.ctid FROM fanout_data.%1$I o
                                              WHERE o.ctid >= $1 AND o.ctid < $2 AND o.created_at < $3
                                              FOR UPDATE SKIP LOCKED))
                      AND d.created_at < $3$q$, v_table || '_dedupe')
                    USING format('(%s,0)', v_sweep.next_block)::tid, format('(%s,0)', v_hi)::tid, p_now - v_window;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_done := v_done + v_n + (v_hi - v_sweep.next_block)::int;
                v_sweep.next_block := v_hi;
            ELSE
                v_done := v_done + 1;  -- dropped or taken: on to the next topic (taken: its rest next pass)
                v_sweep.next_block := v_sweep.pass_end;
            END IF;
        END IF;
        UPDATE fanout.dedupe_sweep s
        SET topic_id = v_sweep.topic_id,
            next_block = CASE WHEN v_sweep.topic_id IS NOT NULL THEN v_sweep.next_block END,
            pass_end = v_sweep.pass_end, pass_started = v_sweep.pass_started;
    END IF;
    -- Published (aggregate, sequence) pairs past their topic's max_retention.
    DELETE FROM fanout.seq_published d
    WHERE (d.topic_id, d.message_group, d.seq) IN (
        SELECT o.topic_id, o.message_group, o.seq FROM fanout.seq_published o
        JOIN fanout.topic t ON t.topic_id = o.topic_id
        WHERE p_now - o.created_at > t.max_retention LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_done + v_n;
END
$fn$;
