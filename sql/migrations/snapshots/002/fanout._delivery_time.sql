-- fanout._delivery_time(p_deliver_at, p_delay): the delivery time a publish
-- asked for: p_deliver_at, or now + p_delay, or NULL (at once). At most 366
-- days ahead. Raises PGQ03 (both given, a negative delay, too far ahead).
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._delivery_time(p_deliver_at timestamptz, p_delay interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_deliver_at IS NOT NULL AND p_delay IS NOT NULL THEN
        RAISE EXCEPTION 'pass deliver_at or delay, not both' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_delay < interval '0' OR p_delay > interval '366 days'
       OR p_deliver_at > clock_timestamp() + interval '366 days' THEN
        RAISE EXCEPTION 'a message can be delayed by at most 366 days, got %', coalesce(p_delay::text, p_deliver_at::text)
            USING ERRCODE = 'PGQ03';
    END IF;
    RETURN coalesce(p_deliver_at, clock_timestamp() + p_delay);
END
$fn$;
