-- fanout._delivery_time(p_deliver_at, p_delay): the delivery time a publish
-- asked for: p_deliver_at, or now + p_delay, or NULL (at once). At most 366
-- days ahead. Raises PGQ03 (both given, a negative delay, too far ahead).
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._delivery_time(p_deliver_at timestamptz, p_delay interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_at timestamptz;
BEGIN
    IF p_deliver_at IS NOT NULL AND p_delay IS NOT NULL THEN
        RAISE EXCEPTION 'pass deliver_at or delay, not both' USING ERRCODE = 'PGQ03';
    END IF;
    -- Before the addition, which fails with PostgreSQL's 22008 for a delay
    -- of millions of years: anything over 1,000 days (whatever a month is
    -- taken as) is over 366 days.
    IF p_delay < interval '0' OR p_delay > interval '1000 days' THEN
        RAISE EXCEPTION 'a message can be delayed by at most 366 days, got %', p_delay
            USING ERRCODE = 'PGQ03';
    END IF;
    v_at := coalesce(p_deliver_at, clock_timestamp() + p_delay);
    -- The time itself is checked, not the interval: interval comparison
    -- counts a month as 30 days ('12 months 6 days' compares equal to 366
    -- days but lands 371 days ahead).
    IF p_delay < interval '0' OR v_at > clock_timestamp() + interval '366 days' THEN
        RAISE EXCEPTION 'a message can be delayed by at most 366 days, got %', coalesce(p_delay::text, p_deliver_at::text)
            USING ERRCODE = 'PGQ03';
    END IF;
    RETURN v_at;
END
$fn$;
