-- fanout.wait_begin(topic, waiter, wait_for): a consumer announces that it is
-- about to wait for topic's NOTIFY (it LISTENs on fanout.channel_name), so
-- that publishers of a topic with notify_when => 'waiters' send one while it
-- waits (fanout._notify_trigger). waiter is the client's own token (unique
-- per waiting consumer; 1..200 characters); the announcement holds for
-- wait_for (1 ms..1 hour) plus one second, or until fanout.wait_end.
-- Protocol (docs/wakeups.md): LISTEN; an empty read; wait_begin; when it
-- returns true, read once more and, if that is empty too, sleep until a
-- notification or the poll interval, then read; wait_end once a read finds
-- messages (announcing again replaces the announcement). false: a publishing
-- transaction was in flight (it may have checked for waiters before this
-- one was announced): nothing is announced; read again soon instead of
-- sleeping, and announce again. NULL: the topic NOTIFYs on every publish,
-- or never (notify => false): nothing to announce, sleep as before.
-- Why no wake-up is lost: the announcement and a SHARE lock on the topic's
-- message table (ONLY the parent; NOWAIT, so publishers never queue behind
-- it) commit together. A publisher inserting while the lock is held waits
-- for the commit and then sees the announcement (its check runs after its
-- insert, in a fresh READ COMMITTED snapshot); one inserting before made
-- the lock fail (false: the consumer reads again after it); a later one
-- sees the announcement. REPEATABLE READ and SERIALIZABLE publishers
-- always notify (their snapshot may predate the announcement).
-- Raises: PGQ21 (no consume grant), PGQ01 (unknown topic), PGQ03 (bad
-- waiter or wait_for). Tables: fanout.topic, fanout.waiter (written),
-- fanout_data.m<topic_id> (locked SHARE, NOWAIT).
CREATE OR REPLACE FUNCTION fanout.wait_begin(
    topic     text,
    waiter    text,
    wait_for  interval DEFAULT '1 second')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_id     bigint;
    v_table  text;
    v_notify boolean;
    v_when   text;
BEGIN
    PERFORM fanout._authorize($1, 'consume');
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'topic must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF $2 IS NULL OR $2 = '' OR length($2) > 200 THEN
        RAISE EXCEPTION 'waiter must have 1 to 200 characters, got %', coalesce(length($2)::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $3 IS NULL OR $3 < interval '1 millisecond' OR $3 > interval '1 hour' THEN
        RAISE EXCEPTION 'wait_for must be from 1 millisecond to 1 hour, got %', coalesce($3::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    SELECT t.topic_id, t.data_table, t.notify, t.notify_when INTO v_id, v_table, v_notify, v_when
    FROM fanout.topic t WHERE t.topic = fanout._nfc($1);
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1) USING ERRCODE = 'PGQ01';
    END IF;
    IF NOT v_notify OR v_when <> 'waiters' THEN
        RETURN NULL;
    END IF;
    BEGIN
        INSERT INTO fanout.waiter AS w (topic_id, waiter, until)
        VALUES (v_id, $2, clock_timestamp() + $3 + interval '1 second')
        ON CONFLICT (topic_id, waiter) DO UPDATE SET until = EXCLUDED.until;
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN SHARE MODE NOWAIT', v_table);
    EXCEPTION WHEN lock_not_available THEN
        -- A publisher is in flight: read again soon. The announcement goes
        -- with the failed lock (the consumer does not sleep on it).
        RETURN false;
    WHEN undefined_table THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1)
            USING ERRCODE = 'PGQ01', HINT = 'it was dropped while this call ran';
    END;
    RETURN true;
END
$fn$;
