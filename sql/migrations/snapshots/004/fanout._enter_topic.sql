-- fanout._enter_topic(p_topic, p_privilege): fanout._enter followed by
-- fanout._topic, for the entry points that use a topic's messages or groups
-- (publish, publish_batch, read, heartbeat, subscribe): the caller's grant
-- (p_privilege 'publish' or 'consume'), the topic's row and, for
-- publish, its bytes quota are checked in one query (fanout._may's
-- expression, inline), then ACCESS SHARE is taken on the topic's message
-- table as fanout._enter takes it. Each entry point checks the caller once
-- per call this way, instead of through a chain of calls that each set
-- search_path again. When the query finds nothing (no grant, no topic, a
-- quota reached, an unknown role), fanout._enter and fanout._topic run and
-- raise the precise error, in the same order as before: the grant first,
-- so a caller without one cannot learn whether a topic exists.
-- Returns the topic's row (fanout.topic).
-- Raises: PGQ21, PGQ25, PGQ01, PGQ03 (NULL topic), PGQ26.
-- Tables: fanout.topic, fanout.topic_grant, fanout.quota_block,
-- pg_namespace, fanout_data.m<topic_id> (locked).
CREATE OR REPLACE FUNCTION fanout._enter_topic(p_topic text, p_privilege text)
RETURNS fanout.topic
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t      fanout.topic;
    v_caller oid;
BEGIN
    v_caller := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                            ELSE current_setting('role') END))::oid;
    SELECT * INTO v_t FROM fanout.topic t
    WHERE t.topic = CASE WHEN p_topic IS NULL OR getdatabaseencoding() <> 'UTF8' OR p_topic IS NFC NORMALIZED
                         THEN p_topic ELSE normalize(p_topic, NFC) END
      AND (p_privilege <> 'publish' OR NOT EXISTS (SELECT 1 FROM fanout.quota_block q WHERE q.topic_id = t.topic_id))
      AND (SELECT pg_has_role(v_caller, n.nspowner, 'USAGE')
                  OR (pg_has_role(v_caller, CASE p_privilege WHEN 'publish' THEN 'fanout_producer'
                                                             ELSE 'fanout_consumer' END, 'USAGE')
                      AND EXISTS (
                          SELECT 1 FROM fanout.topic_grant g
                          WHERE (g.privilege = p_privilege OR g.privilege = 'admin')
                            AND CASE WHEN right(g.pattern, 1) = '%' THEN starts_with(t.topic, left(g.pattern, -1))
                                     ELSE t.topic = g.pattern END
                            AND pg_has_role(v_caller, g.role, 'USAGE')))
           FROM pg_namespace n WHERE n.nspname = 'fanout');
    IF v_t.topic_id IS NULL OR v_caller IS NULL THEN
        PERFORM fanout._enter(p_topic, p_privilege);
        RETURN fanout._topic(p_topic);
    END IF;
    -- As fanout._authorize notes an allowed caller (fanout._lock_lease).
    IF current_setting('fanout.xact_caller', true) IS DISTINCT FROM v_caller::text THEN
        PERFORM set_config('fanout.xact_caller',
                           CASE WHEN coalesce(current_setting('fanout.xact_caller', true), '') = ''
                                THEN v_caller::text ELSE '0' END, true);
    END IF;
    -- fanout._enter's lock: a drop under way is waited for, then PGQ01.
    BEGIN
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS SHARE MODE', v_t.data_table);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal(p_topic)
            USING ERRCODE = 'PGQ01', HINT = 'it was dropped while this call waited';
    END;
    RETURN v_t;
END
$fn$;
