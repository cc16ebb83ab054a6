-- fanout._epoch(): the server incarnation that hands out a lease, in 16
-- bits: the low 6 bits of the WAL timeline (a promoted standby always runs
-- on a new timeline) over 10 bits of a hash of the postmaster's start time
-- (a restart) and of the shared statistics' reset time (crash recovery: the
-- postmaster reinitialises after a backend dies by a signal without
-- restarting, and discards the statistics). Nothing in it is replicated or
-- WAL-logged, so a failover or a crash that rolls back the lease table
-- cannot roll it back: the lease ids a new primary, or the recovered one,
-- issues for rolled-back pages differ from the lost ones, and a stale
-- holder's ack is fenced (fanout._lock_lease). Two timelines 64 apart, or
-- two incarnations with equal hashes (1 in 1,024), share an epoch. A change
-- with no loss (pg_stat_reset_shared('bgwriter')) fences nothing: an id is
-- checked against the epoch its slot recorded, not the running one.
-- Only on a primary (pg_current_wal_lsn raises during recovery; leases are
-- only handed out there). Touches no table. In plpgsql, not SQL: a SQL
-- function that pins search_path is never inlined, and is parsed and
-- planned again in every transaction that calls it (once per page read);
-- plpgsql keeps its expression's plan for the session.
CREATE OR REPLACE FUNCTION fanout._epoch()
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int & 63) << 10)
           | (hashtextextended(concat_ws(':', extract(epoch FROM pg_postmaster_start_time()),
                                         extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time())), 0)
              & 1023)::int;
END
$fn$;
