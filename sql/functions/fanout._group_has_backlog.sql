-- fanout._group_has_backlog(p_group_id): true when the group still has
-- something to consume or settle: an open lease, a pending retry, a message
-- waiting for its sequence's turn (fanout.seq_wait), or a
-- committed message its stream has not handed out (fanout._group_unread).
-- Reads fanout.lease, fanout.retry, fanout.seq_wait and the topic's message table.
CREATE OR REPLACE FUNCTION fanout._group_has_backlog(p_group_id bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM fanout.lease l WHERE l.group_id = p_group_id AND l.open_count > 0)
       OR EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = p_group_id)
       OR EXISTS (SELECT 1 FROM fanout.seq_wait w WHERE w.group_id = p_group_id) THEN
        RETURN true;
    END IF;
    RETURN (SELECT u.messages > 0 FROM fanout._group_unread(p_group_id, 1) u);
END
$fn$;
