-- fanout.purge_dead_letters(topic, group_name, older_than): deletes dead
-- letters that died more than older_than ago. group_name NULL = every group
-- of the topic. Returns how many were deleted.
-- Raises: PGQ01, PGQ03 (older_than NULL or negative), PGQ14.
-- Tables: fanout.dead_letter.
CREATE OR REPLACE FUNCTION fanout.purge_dead_letters(topic text, group_name text, older_than interval)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
    v_n int;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    IF $3 IS NULL OR $3 < interval '0' THEN
        RAISE EXCEPTION 'older_than must be a non-negative interval, got %', coalesce($3::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    v_t := fanout._topic($1);
    IF $2 IS NOT NULL AND v_t.semantics = 'pubsub'
       AND NOT EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = v_t.topic_id AND g.group_name = fanout._nfc($2)) THEN
        RAISE EXCEPTION 'group % is not subscribed to topic %', quote_literal($2), quote_literal($1)
            USING ERRCODE = 'PGQ14';
    END IF;
    DELETE FROM fanout.dead_letter d
    USING fanout.consumer_group g
    WHERE g.group_id = d.group_id AND g.topic_id = v_t.topic_id
      AND ($2 IS NULL OR v_t.semantics = 'queue' OR g.group_name = fanout._nfc($2))
      AND clock_timestamp() - d.dead_at > $3;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
