-- fanout._tally_trigger(): keeps fanout.group_tally bounded. After lease
-- slots are deleted (cleanup of idle slots, a group's or topic's removal),
-- their counts move into their group's slot_id 0 row, so the group's totals
-- stay as they were; after groups are deleted, their rows go. Statement
-- level, over the deleted rows (transition table old_rows). Only deleting
-- statements write a slot_id 0 row (cleanup under its lock row, a removal of
-- the group), never an ack, so no member waits for it; a deleted slot had no
-- open lease, so no ack holds its row.
-- Tables: fanout.group_tally, fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._tally_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF TG_TABLE_NAME = 'lease' THEN
        WITH gone AS (
            DELETE FROM fanout.group_tally t USING old_rows o
            WHERE t.group_id = o.group_id AND t.slot_id = o.slot_id
            RETURNING t.group_id, t.acked, t.nacked)
        INSERT INTO fanout.group_tally AS t (group_id, slot_id, acked, nacked)
        SELECT g.group_id, 0, sum(g.acked), sum(g.nacked) FROM gone g
        WHERE EXISTS (SELECT 1 FROM fanout.consumer_group c WHERE c.group_id = g.group_id)
        GROUP BY g.group_id
        ON CONFLICT (group_id, slot_id) DO UPDATE
        SET acked = t.acked + excluded.acked, nacked = t.nacked + excluded.nacked;
    ELSE
        DELETE FROM fanout.group_tally t USING old_rows o WHERE t.group_id = o.group_id;
    END IF;
    RETURN NULL;
END
$fn$;
