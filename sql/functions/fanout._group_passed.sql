-- fanout._group_passed(p_g, p_part): whether the group is done with every row
-- of a closed partition: the partition lies wholly before the group's start,
-- or its stream floor is at or above the partition's txid bound and no open
-- lease or pending retry of the group points into it.
-- Reads fanout.lease and fanout.retry.
CREATE OR REPLACE FUNCTION fanout._group_passed(p_g fanout.consumer_group, p_part fanout.partition)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT p_part.hi_id <= coalesce(p_g.effective_start_id, 0)
        OR (p_part.txid_bound IS NOT NULL
            AND fanout._group_floor(p_g) >= p_part.txid_bound
            AND NOT EXISTS (SELECT 1 FROM fanout.lease l
                            WHERE l.group_id = p_g.group_id AND l.open_count > 0 AND l.min_id < p_part.hi_id)
            AND NOT EXISTS (SELECT 1 FROM fanout.retry r
                            WHERE r.group_id = p_g.group_id AND r.message_id < p_part.hi_id))
$fn$;
