-- _attach.sql: triggers on pgq's own catalog tables (the per-topic triggers
-- are attached by fanout.create_topic).
CREATE OR REPLACE TRIGGER group_mask
AFTER INSERT OR UPDATE OF status, bit_no OR DELETE ON fanout.consumer_group
FOR EACH ROW EXECUTE FUNCTION fanout._group_mask_trigger();
