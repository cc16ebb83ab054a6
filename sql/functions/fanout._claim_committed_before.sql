-- fanout._claim_committed_before(p_claim_txid, p_snap): whether the
-- transaction that claimed a dedupe key (the top-level transaction recorded
-- in the key's row, claim_txid: a row's xmin may be a subtransaction's id,
-- which no snapshot lists as running) had committed in p_snap, a snapshot
-- the publisher took before it could wait for the key's holder; never the
-- caller's own transaction. The claim's ON CONFLICT ... DO UPDATE takes over
-- a key past its dedupe_window only then: a publisher that found the key
-- held by an open transaction never takes it over, however long that
-- transaction stayed open, and gets the holder's message id (the single
-- path passes its statement's snapshot; a batch, whose first attempt may
-- have waited in an earlier statement, one taken before it); and a
-- transaction that publishes a key twice gets one message. Touches no table.
CREATE OR REPLACE FUNCTION fanout._claim_committed_before(p_claim_txid xid8, p_snap pg_snapshot)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT p_claim_txid <> pg_current_xact_id() AND pg_visible_in_snapshot(p_claim_txid, p_snap)
$fn$;
