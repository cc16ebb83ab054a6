-- fanout._epoch(): the server incarnation that hands out a lease, in 12
-- bits: the low 6 bits of the WAL timeline (a promoted standby always runs
-- on a new timeline) over 6 bits of a hash of the postmaster's start time
-- (a restart). Nothing in it is replicated or WAL-logged, so a failover or
-- a crash that rolls back the lease table cannot roll it back: the lease ids
-- a new primary issues for rolled-back pages differ from the lost ones, and
-- a stale holder's ack is fenced (fanout._lock_lease). Two timelines 64
-- apart, or two restarts with equal hashes (1 in 64), share an epoch.
-- Only on a primary (pg_current_wal_lsn raises during recovery; leases are
-- only handed out there). Touches no table.
CREATE OR REPLACE FUNCTION fanout._epoch()
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int & 63) << 6)
           | (hashtextextended((extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text, 0)
              & 63)::int
$fn$;
