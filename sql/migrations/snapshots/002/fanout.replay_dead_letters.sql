-- fanout.replay_dead_letters(topic, group_name, message_ids): makes the named
-- dead letters readable again by their group, as new deliveries (attempt
-- counting starts over). Explicit ids only: no free-form filter.
-- group_name is NULL (ignored) on queue topics. All or nothing.
-- Returns how many messages were replayed.
-- Raises: PGQ01, PGQ03 (NULL or NULL element), PGQ13, PGQ14, PGQ20 (an id is
-- not a dead letter of that group), PGQ18 (its message is past retention).
-- Tables: fanout.dead_letter, fanout.retry, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout.replay_dead_letters(topic text, group_name text, message_ids bigint[])
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_g       fanout.consumer_group;
    v_table   text;
    v_missing bigint[];
    v_n       int;
BEGIN
    IF $3 IS NULL OR array_position($3, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message_ids must be an array of ids without NULLs' USING ERRCODE = 'PGQ03';
    END IF;
    v_g := fanout._group_for_admin($1, $2);
    SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    v_missing := ARRAY(SELECT DISTINCT x FROM unnest($3) AS x
                       WHERE NOT EXISTS (SELECT 1 FROM fanout.dead_letter d
                                         WHERE d.group_id = v_g.group_id AND d.message_id = x)
                       ORDER BY x);
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION 'message(s) % are not dead letters of this group', array_to_string(v_missing, ', ')
            USING ERRCODE = 'PGQ20';
    END IF;
    EXECUTE format(
        'SELECT ARRAY(SELECT d.message_id FROM fanout.dead_letter d
                      WHERE d.group_id = $1 AND d.message_id = ANY ($2)
                        AND NOT EXISTS (SELECT 1 FROM fanout_data.%I m WHERE m.txid = d.txid AND m.id = d.message_id)
                      ORDER BY d.message_id)', v_table)
        INTO v_missing USING v_g.group_id, $3;
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION 'message(s) % are past retention and cannot be replayed', array_to_string(v_missing, ', ')
            USING ERRCODE = 'PGQ18', HINT = 'their copies stay readable in fanout.dead_letters';
    END IF;
    WITH moved AS (
        DELETE FROM fanout.dead_letter d
        WHERE d.group_id = v_g.group_id AND d.message_id = ANY ($3)
        RETURNING d.message_id, d.txid, d.last_error)
    INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, last_error)
    SELECT v_g.group_id, moved.message_id, moved.txid, 0, clock_timestamp(), moved.last_error FROM moved
    ON CONFLICT (group_id, message_id) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
