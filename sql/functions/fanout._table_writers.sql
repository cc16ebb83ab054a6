-- fanout._table_writers(p_rel): the xids (as xid8) of the transactions that
-- hold a lock on relation p_rel and have an xid: the only ones that can
-- still commit rows into it written before now. pg_locks shows 32-bit xids;
-- they are widened around the current snapshot's xmax (running xids are
-- within 2^31 of it). Reads pg_locks.
CREATE OR REPLACE FUNCTION fanout._table_writers(p_rel regclass)
RETURNS xid8[]
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    WITH ref AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS v)
    SELECT coalesce(array_agg(DISTINCT
               (ref.v + ((xl.transactionid::text::bigint - ref.v) % 4294967296 + 4294967296 + 2147483648)
                        % 4294967296 - 2147483648)::text::xid8), '{}')
    FROM pg_locks rl
    JOIN pg_locks xl ON xl.virtualtransaction = rl.virtualtransaction AND xl.locktype = 'transactionid'
                    AND xl.mode = 'ExclusiveLock'
    CROSS JOIN ref
    WHERE rl.locktype = 'relation' AND rl.relation = p_rel
      AND rl.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
$fn$;
