-- fanout._claim_committed_before(p_xmin, p_snap): whether the transaction
-- that wrote a dedupe key's row (its xmin) had committed in p_snap, a
-- snapshot the publisher took before it could wait for the row's holder.
-- The claim's ON CONFLICT ... DO UPDATE takes over a key past its
-- dedupe_window only then: a publisher that found the key held by an open
-- transaction never takes it over, however long that transaction stayed
-- open, and gets the holder's message id (the single path passes its
-- statement's snapshot; a batch, whose first attempt may have waited in an
-- earlier statement, one taken before it). The row's 32-bit xmin is widened
-- to a full transaction id against the caller's own (which a publisher
-- always has: it writes), exact for rows younger than 2^31 transactions;
-- older ones count as committed. Touches no table.
CREATE OR REPLACE FUNCTION fanout._claim_committed_before(p_xmin xid, p_snap pg_snapshot)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT pg_visible_in_snapshot(
               (((c.cur >> 32) - (x.raw > (c.cur & 4294967295))::int) << 32 | x.raw)::text::xid8, p_snap)
    FROM (SELECT pg_current_xact_id()::text::bigint AS cur) c,
         (SELECT p_xmin::text::bigint AS raw) x
$fn$;
