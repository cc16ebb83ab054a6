-- fanout.nack(lease_id, message_ids, retry_in, error): gives messages back for
-- redelivery to the same group after retry_in ('0' = as soon as possible;
-- NULL = exponential backoff 1 s, 2 s, 4 s, ... capped at 15 minutes). A
-- message that has used up the topic's max_attempts goes to the group's dead
-- letters with error as its last_error instead.
-- Returns how many messages this call settled.
-- Raises: as fanout.ack; PGQ03 retry_in negative or over 7 days, error over
-- 8192 characters.
-- Tables: fanout.lease, fanout.retry, fanout.dead_letter, fanout.group_tally (the group's nack counter,
-- fanout._tally), fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout.nack(
    lease_id    bigint,
    message_ids bigint[] DEFAULT NULL,
    retry_in    interval DEFAULT '0',
    error       text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_l       fanout.lease;
    v_targets bigint[];
    v_n       int;
    v_max     int;
    v_table   text;
    v_now     timestamptz := clock_timestamp();
    v_dead    record;
BEGIN
    IF $3 < interval '0' OR $3 > interval '7 days' THEN
        RAISE EXCEPTION 'retry_in must be an interval from 0 to 7 days, got %', $3 USING ERRCODE = 'PGQ03';
    END IF;
    IF char_length($4) > 8192 THEN
        RAISE EXCEPTION 'error is % characters long; the limit is 8192', char_length($4) USING ERRCODE = 'PGQ03';
    END IF;
    v_l := fanout._lock_lease($1);
    v_targets := fanout._lease_targets(v_l, $2);
    v_n := cardinality(v_targets);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT t.max_attempts, t.data_table INTO v_max, v_table
    FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE g.group_id = v_l.group_id;

    INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, last_error, kpart)
    SELECT v_l.group_id, u.id, u.tx, u.att,
           v_now + coalesce($3, least(interval '1 second' * power(2, u.att - 1), interval '15 minutes')),
           $4, v_l.kpart
    FROM unnest(v_l.msg_ids, v_l.msg_txids, v_l.attempts) AS u(id, tx, att)
    WHERE u.id = ANY (v_targets) AND u.att < v_max
    ON CONFLICT (group_id, message_id) DO UPDATE
    SET attempt = excluded.attempt, not_before = excluded.not_before, last_error = excluded.last_error,
        kpart = excluded.kpart;

    SELECT array_agg(u.id) AS ids, array_agg(u.tx) AS txids, array_agg(u.att) AS atts INTO v_dead
    FROM unnest(v_l.msg_ids, v_l.msg_txids, v_l.attempts) AS u(id, tx, att)
    WHERE u.id = ANY (v_targets) AND u.att >= v_max;
    IF v_dead.ids IS NOT NULL THEN
        PERFORM fanout._dead_letter(v_l.group_id, v_table, v_dead.ids, v_dead.txids, v_dead.atts, $4);
    END IF;

    PERFORM fanout._lease_settle(v_l.lease_id, v_targets, false, true, v_now);
    PERFORM fanout._tally(v_l.group_id, v_l.slot_id, 0, v_n);
    RETURN v_n;
END
$fn$;
