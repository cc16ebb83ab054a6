-- fanout.force_complete_orphaned(topic, older_than): reference mode: messages
-- published more than older_than ago that are still pending only for groups
-- that are gone (dead, cancelled or deleted) get those groups' bits cleared
-- from required_groups, so they complete and can be cleaned up. Offset-mode
-- topics have nothing to force: a dead or cancelled group never pins their
-- data, so this returns 0 for them; nor have the messages below the switch
-- id of a topic switched from offset to reference (no bits).
-- Returns how many messages were completed.
-- Raises: PGQ01, PGQ03 (older_than NULL or negative).
-- Tables: fanout.consumer_group, fanout.event_log, fanout_data.m<topic_id>,
-- fanout_data.m<topic_id>_done (read).
CREATE OR REPLACE FUNCTION fanout.force_complete_orphaned(topic text, older_than interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t    fanout.topic;
    v_live bigint;
    v_n    bigint;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    IF $2 IS NULL OR $2 < interval '0' THEN
        RAISE EXCEPTION 'older_than must be a non-negative interval, got %', coalesce($2::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    v_t := fanout._topic($1);
    IF v_t.completion <> 'reference' THEN
        RETURN 0;
    END IF;
    v_live := fanout._required_mask(v_t.topic_id);
    EXECUTE format(
        'UPDATE fanout_data.%1$I m SET required_groups = m.required_groups & (c.done | $1)
         FROM (SELECT m0.id, coalesce(d.bits, 0) AS done
               FROM fanout_data.%1$I m0
               LEFT JOIN (SELECT u.id, bit_or(1::bigint << d0.bit) AS bits
                          FROM fanout_data.%2$I d0 CROSS JOIN LATERAL unnest(d0.ids) AS u(id)
                          GROUP BY u.id) d ON d.id = m0.id
               WHERE clock_timestamp() - m0.published_at > $2 AND m0.id >= $3) c
         WHERE m.id = c.id
           AND (m.required_groups & ~c.done) <> 0
           AND (m.required_groups & ~c.done & $1) = 0', v_t.data_table, v_t.data_table || '_done')
        USING v_live, $2, coalesce(v_t.completion_switch_id, 0);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        INSERT INTO fanout.event_log (topic, kind, count, detail)
        VALUES (v_t.topic, 'orphans_completed', v_n, jsonb_build_object('older_than', $2::text));
    END IF;
    RETURN v_n;
END
$fn$;
