-- fanout._kpart_expr(p_partitions, p_arg): the SQL expression (with a leading
-- comma) that the insert functions of a partitioned topic use for a
-- message's kpart: fanout._kpart_of(<p_arg>, P), and for a NULL
-- message_group a random partition (spread evenly). '' when p_partitions is
-- NULL (unpartitioned: no kpart column). Touches no table.
CREATE OR REPLACE FUNCTION fanout._kpart_expr(p_partitions int, p_arg text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT CASE WHEN p_partitions IS NULL THEN ''
           ELSE format(', coalesce(fanout._kpart_of(%1$s, %2$s), floor(random() * %2$s)::int)', p_arg, p_partitions)
           END
$fn$;
