-- _attach.sql: triggers on pgq's own catalog tables (the per-topic triggers
-- are attached by fanout.create_topic).
CREATE OR REPLACE TRIGGER group_mask
AFTER INSERT OR UPDATE OF status, bit_no OR DELETE ON fanout.consumer_group
FOR EACH ROW EXECUTE FUNCTION fanout._group_mask_trigger();
-- The ack and nack counters of fanout.group_tally (fanout._tally_trigger).
CREATE OR REPLACE TRIGGER group_tally_fold
AFTER DELETE ON fanout.lease
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION fanout._tally_trigger();
CREATE OR REPLACE TRIGGER group_tally_drop
AFTER DELETE ON fanout.consumer_group
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION fanout._tally_trigger();
