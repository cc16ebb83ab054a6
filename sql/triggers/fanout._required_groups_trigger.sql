-- fanout._required_groups_trigger(): BEFORE INSERT row trigger on the message
-- table of a reference-mode topic (topic id in TG_ARGV[0]). Stamps the
-- message with the groups it requires: the topic's required_mask in
-- fanout.topic_state (exact, kept by fanout._group_mask_trigger), so a group
-- whose subscription committed is required by every message whose insert
-- sees that commit. (Completion is recorded beside the row, never in it:
-- fanout._complete_bits.)
-- The stamp may be stale when the insert's snapshot predates a change of the
-- mask (a REPEATABLE READ transaction, or a change still committing): the
-- mask's newest epoch is kept in a sequence, outside MVCC, and when it is
-- ahead of the epoch this snapshot sees, the transaction is listed in
-- fanout.stamp_pending, to be restamped once it has ended
-- (fanout._reconcile_stamps); so is one that sees no topic_state row (a
-- REPEATABLE READ snapshot from before a switch from offset completion;
-- a topic switched back to offset keeps its row, fanout._completion_switch_finish).
-- Writers that were already past this check when
-- the mask changed are listed by the change itself.
CREATE OR REPLACE FUNCTION fanout._required_groups_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_epoch bigint;
    v_live  bigint;
BEGIN
    SELECT s.required_mask, s.epoch, pg_sequence_last_value(s.epoch_seq)
    INTO NEW.required_groups, v_epoch, v_live
    FROM fanout.topic_state s WHERE s.topic_id = TG_ARGV[0]::bigint;
    NEW.required_groups := coalesce(NEW.required_groups, 0);
    -- No row: this snapshot predates the topic's switch from offset to
    -- reference completion (fanout._completion_switch_reference; the
    -- trigger, a catalog object, is seen at once, the row is not), so the
    -- mask it would need is unknown: listed too.
    IF v_live > v_epoch OR v_epoch IS NULL THEN
        INSERT INTO fanout.stamp_pending (topic_id, txid)
        SELECT TG_ARGV[0]::bigint, NEW.txid
        WHERE NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s
                          WHERE s.topic_id = TG_ARGV[0]::bigint AND s.txid = NEW.txid);
    END IF;
    RETURN NEW;
END
$fn$;
