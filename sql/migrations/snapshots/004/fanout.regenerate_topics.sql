-- fanout.regenerate_topics(after_topic_id, max_topics): rebuilds the
-- generated per-topic functions of existing topics (fanout_data.m<id>_insert,
-- _insert_batch, _insert_one, _insert_keyed, _claim, _insert_claimed, _page,
-- _rows, and _done_add while the topic has a completion table) with the
-- generators of the installed version (fanout._create_insert_functions,
-- fanout._create_page_functions, fanout._create_done_function), so a fix to
-- a generator reaches topics created before it. Every upgrade migration
-- calls it. Each topic's generated functions are dropped first (a function
-- an older generator made and the new one no longer does goes too; a changed
-- result type needs it) and made again, under the topic's row lock (FOR NO
-- KEY UPDATE: alter_topic and drop_topic wait, rows referencing the topic
-- (a new group, a partition, a stamp) do not; a topic dropped meanwhile is
-- passed by). Publishers and readers are not blocked: they see the old
-- functions until this transaction commits, then the new ones. A topic
-- created by a transaction that started before this one's commit is made by
-- the generators it saw: run this again after it. Idempotent.
-- Parameters: after_topic_id: start after this topic id (0: from the first);
-- max_topics: at most this many topics (NULL: all), for callers that commit
-- in batches. Returns the number of topics regenerated.
-- Raises: PGQ03 (max_topics negative).
-- Nobody but the owner may call it (migrations). Tables: fanout.topic;
-- drops and creates functions in fanout_data.
CREATE OR REPLACE FUNCTION fanout.regenerate_topics(after_topic_id bigint DEFAULT 0, max_topics int DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_id    bigint;
    v_t     fanout.topic;
    v_fn    regprocedure;
    v_n     int := 0;
BEGIN
    IF $2 < 0 THEN
        RAISE EXCEPTION 'max_topics must not be negative, got %', $2 USING ERRCODE = 'PGQ03';
    END IF;
    FOR v_id IN
        SELECT t.topic_id FROM fanout.topic t
        WHERE t.topic_id > coalesce($1, 0) ORDER BY t.topic_id LIMIT $2
    LOOP
        SELECT * INTO v_t FROM fanout.topic t WHERE t.topic_id = v_id FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        FOR v_fn IN
            SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'fanout_data'::regnamespace
              AND p.proname LIKE replace(v_t.data_table, '_', '\_') || '\_%'
            ORDER BY p.oid
        LOOP
            EXECUTE format('DROP FUNCTION %s', v_fn);
        END LOOP;
        PERFORM fanout._create_insert_functions(v_t.topic_id);
        PERFORM fanout._create_page_functions(v_t.topic_id);
        -- Reference mode, and a topic switched from it while its completion
        -- table is still there (fanout._completion_switch).
        IF v_t.completion = 'reference'
           OR to_regclass(format('fanout_data.%I', v_t.data_table || '_done')) IS NOT NULL THEN
            PERFORM fanout._create_done_function(v_t.topic_id);
        END IF;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$fn$;
