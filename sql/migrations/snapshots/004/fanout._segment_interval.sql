-- fanout._segment_interval(p_segment_interval, p_partition_interval): the
-- segment interval a create_topic or alter_topic call asked for.
-- segment_interval is the parameter's name; partition_interval is its
-- deprecated alias (kept until the next minor release, docs/releases.md).
-- Either may be given, or both with the same value; NULL when neither is.
-- Raises PGQ03 when both are given with different values. Touches no table.
CREATE OR REPLACE FUNCTION fanout._segment_interval(p_segment_interval interval, p_partition_interval interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_segment_interval IS NOT NULL AND p_partition_interval IS NOT NULL
       AND p_segment_interval <> p_partition_interval THEN
        RAISE EXCEPTION 'segment_interval % and partition_interval % differ', p_segment_interval, p_partition_interval
            USING ERRCODE = 'PGQ03',
                  HINT = 'pass segment_interval only: partition_interval is its deprecated alias';
    END IF;
    RETURN coalesce(p_segment_interval, p_partition_interval);
END
$fn$;
