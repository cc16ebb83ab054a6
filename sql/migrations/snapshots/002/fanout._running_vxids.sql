-- fanout._running_vxids(): the virtual transaction ids of every transaction
-- of the current database that is running now, but the caller's own
-- (prepared transactions run no more statements: not listed). Used by
-- fanout._manage_partitions to wait for transactions whose partition list
-- may predate a change. pg_stat_activity is read afresh: within one
-- transaction it is otherwise a snapshot taken at its first use, which would
-- leave out sessions started since. Autovacuum workers are left out: they
-- work on the leaf tables only and never through a partitioned table's
-- partition list, and one that happened to run (an analyze of a busy
-- catalog table) held a rotation back for nothing. Returns text[]. Reads
-- pg_locks and pg_stat_activity.
CREATE OR REPLACE FUNCTION fanout._running_vxids()
RETURNS text[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM pg_stat_clear_snapshot();
    RETURN (SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}')
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'virtualxid' AND a.datname = current_database() AND l.pid <> pg_backend_pid()
      AND a.backend_type IS DISTINCT FROM 'autovacuum worker');
END
$fn$;
