-- fanout._done_bits(p_table, p_ids): reference mode: for each of p_ids that
-- some group is done with (acked or dead-lettered, fanout._complete_bits),
-- the bits of those groups, read from the completion table
-- fanout_data.<p_table>_done (p_table is the topic's data_table). Ids no
-- group is done with are left out. The completion rows are found through
-- their id range (GiST on int8range(lo, hi)), so a batch of nearby ids costs
-- the rows that overlap it, not the partition.
-- Reads fanout_data.m<topic_id>_done.
CREATE OR REPLACE FUNCTION fanout._done_bits(p_table text, p_ids bigint[])
RETURNS TABLE (id bigint, bits bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_lo bigint;
    v_hi bigint;
BEGIN
    SELECT min(x), max(x) INTO v_lo, v_hi FROM unnest(p_ids) AS x;
    IF v_lo IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT u.id, bit_or(1::bigint << d.bit)
         FROM fanout_data.%I d CROSS JOIN LATERAL unnest(d.ids) AS u(id)
         WHERE int8range(d.lo, d.hi, ''[]'') && int8range($2, $3, ''[]'') AND u.id = ANY ($1)
         GROUP BY u.id', p_table || '_done')
        USING p_ids, v_lo, v_hi;
END
$fn$;
