-- fanout._required_groups_trigger(): BEFORE INSERT row trigger on the message
-- table of a reference-mode topic (topic id in TG_ARGV[0]). Stamps the
-- message with the groups it requires: the topic's required_mask in
-- fanout.topic_state (exact, kept by fanout._group_mask_trigger), so a group
-- whose subscription committed is required by every message whose insert
-- sees that commit. completed_groups always starts empty.
CREATE OR REPLACE FUNCTION fanout._required_groups_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    SELECT s.required_mask INTO NEW.required_groups
    FROM fanout.topic_state s WHERE s.topic_id = TG_ARGV[0]::bigint;
    NEW.required_groups := coalesce(NEW.required_groups, 0);
    NEW.completed_groups := 0;
    RETURN NEW;
END
$fn$;
