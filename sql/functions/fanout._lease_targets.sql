-- fanout._lease_targets(p_l, p_message_ids): the messages of lease p_l that an
-- ack/nack of p_message_ids (NULL = the whole lease) settles now: the ones
-- not settled yet. Fencing happens here: a message that expired and was
-- re-delivered to another lease can no longer be settled through this one.
-- An earlier page of a reused slot comes as an empty page (fanout._lock_lease):
-- its messages were all settled, so nothing is (no check of p_message_ids).
-- Raises: PGQ03 NULL element, PGQ11 fenced, PGQ12 message not in the lease
-- (messages name the lease by its public id, fanout._lease_code).
-- Tables: fanout.lease_key (for those messages only).
CREATE OR REPLACE FUNCTION fanout._lease_targets(p_l fanout.lease, p_message_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_req  bigint[] := coalesce(p_message_ids, p_l.msg_ids);
    v_bad  bigint[];
BEGIN
    IF p_message_ids IS NULL AND cardinality(p_l.reclaimed) = 0 THEN
        -- The whole lease, nothing taken away: the common ack, kept cheap.
        IF p_l.open_count = 0 THEN
            RETURN '{}';  -- settled in full (settled is then '{}': fanout._lease_settle)
        END IF;
        IF cardinality(p_l.settled) = 0 THEN
            RETURN p_l.msg_ids;
        END IF;
        RETURN ARRAY(SELECT x FROM unnest(p_l.msg_ids) AS x WHERE x <> ALL (p_l.settled));
    END IF;
    IF array_position(v_req, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message_ids must not contain NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF cardinality(p_l.msg_ids) = 0 THEN
        RETURN '{}';  -- an earlier page of a reused slot: settled in full
    END IF;
    v_bad := ARRAY(SELECT DISTINCT x FROM unnest(v_req) AS x WHERE x = ANY (p_l.reclaimed) ORDER BY x);
    IF cardinality(v_bad) > 0 THEN
        RAISE EXCEPTION 'lease % expired and message(s) % were taken from it (re-delivered to another consumer, dead-lettered or dropped)',
            fanout._lease_code(p_l.lease_id, true), array_to_string(v_bad, ', ')
            USING ERRCODE = 'PGQ11',
                  HINT = 'roll back this transaction; the new holder will process the message(s)';
    END IF;
    v_bad := ARRAY(SELECT DISTINCT x FROM unnest(v_req) AS x WHERE x <> ALL (p_l.msg_ids) ORDER BY x);
    IF cardinality(v_bad) > 0 THEN
        RAISE EXCEPTION 'message(s) % are not part of lease %', array_to_string(v_bad, ', '), fanout._lease_code(p_l.lease_id, true)
            USING ERRCODE = 'PGQ12';
    END IF;
    IF p_l.open_count = 0 THEN
        RETURN '{}';  -- settled in full, whatever settled lists
    END IF;
    RETURN ARRAY(SELECT DISTINCT x FROM unnest(v_req) AS x WHERE x <> ALL (p_l.settled) ORDER BY x);
END
$fn$;
