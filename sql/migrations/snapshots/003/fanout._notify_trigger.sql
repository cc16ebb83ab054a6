-- fanout._notify_trigger(): statement-level AFTER INSERT trigger on a topic's
-- message table. Sends one NOTIFY (payload empty) on the channel passed as
-- TG_ARGV[0], whatever the number of rows the statement inserted; consumers
-- LISTEN on it and poll as a fallback. Opt out per topic with notify => false
-- (NOTIFY serialises committers on a database-wide lock), or per call with
-- publish(..., notify => false) (fanout._notify_override).
CREATE OR REPLACE FUNCTION fanout._notify_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF current_setting('fanout.notify_off', true) = 'on' THEN
        RETURN NULL;  -- this publish passed notify => false
    END IF;
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$fn$;
