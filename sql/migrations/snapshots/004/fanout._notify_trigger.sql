-- fanout._notify_trigger(): statement-level AFTER INSERT trigger on a topic's
-- message table. Sends one NOTIFY (payload empty) on the channel passed as
-- TG_ARGV[0], whatever the number of rows the statement inserted; consumers
-- LISTEN on it and poll as a fallback. On a topic with notify_when =>
-- 'waiters' (its row in fanout.topic; the table is m<topic_id>) only while
-- a consumer announced its wait (fanout.wait_begin) and the announcement
-- has not expired, or when this transaction is not READ COMMITTED (its
-- snapshot may predate an announcement): docs/wakeups.md. Opt out per
-- topic with notify => false (NOTIFY serialises committers on a
-- database-wide lock), or per call with publish(..., notify => false)
-- (fanout._notify_override).
-- Tables: fanout.topic, fanout.waiter (read).
CREATE OR REPLACE FUNCTION fanout._notify_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF current_setting('fanout.notify_off', true) = 'on' THEN
        RETURN NULL;  -- this publish passed notify => false
    END IF;
    IF current_setting('transaction_isolation') = 'read committed'
       AND (SELECT t.notify_when = 'waiters'
                   AND NOT EXISTS (SELECT 1 FROM fanout.waiter w
                                   WHERE w.topic_id = t.topic_id AND w.until > clock_timestamp())
            FROM fanout.topic t WHERE t.topic_id = substr(TG_TABLE_NAME, 2)::bigint) THEN
        RETURN NULL;  -- nobody waits: the next read finds the message anyway
    END IF;
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$fn$;
