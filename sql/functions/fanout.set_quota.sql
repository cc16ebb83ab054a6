-- fanout.set_quota(pattern, role, privilege, max_topics, max_groups,
-- max_bytes): sets the quotas of an existing grant (fanout.grant_topic).
-- A quota bounds the pattern's topics, whoever creates or uses them:
-- max_topics topics whose names the pattern matches (checked at
-- create_topic), max_groups consumer groups (any status) on those topics
-- together (checked at subscribe), max_bytes bytes retained by those topics
-- together (measured by maintenance, fanout._measure_usage; publishing to
-- them raises PGQ25 from the round that finds them over until one finds
-- them under again). NULL is no limit. Only the operator (a superuser or
-- the schema owner) sets quotas: a tenant admin could raise its own.
-- Returns true when the grant exists (and now has these quotas).
-- Raises: PGQ03 (a negative quota, no such grant, NULL role, unknown
-- privilege), PGQ04 (bad pattern), PGQ21 (not the operator).
-- Tables: fanout.topic_grant, fanout.quota_block, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.set_quota(
    pattern     text,
    role        regrole,
    privilege   text,
    max_topics  bigint DEFAULT NULL,
    max_groups  bigint DEFAULT NULL,
    max_bytes   bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_priv    text := lower(btrim($3));
    v_pattern text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_namespace n
                   WHERE n.nspname = 'fanout' AND pg_has_role(fanout._caller(), n.nspowner, 'USAGE')) THEN
        RAISE EXCEPTION 'only the operator (a superuser or the owner of schema fanout) sets quotas'
            USING ERRCODE = 'PGQ21';
    END IF;
    v_pattern := fanout._check_name('pattern', $1);
    IF $2 IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF v_priv IS NULL OR v_priv NOT IN ('publish', 'consume', 'admin') THEN
        RAISE EXCEPTION 'privilege must be publish, consume or admin, got %', coalesce(quote_literal($3), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $4 < 0 OR $5 < 0 OR $6 < 0 THEN
        RAISE EXCEPTION 'quotas must not be negative (max_topics %, max_groups %, max_bytes %)',
            coalesce($4::text, 'NULL'), coalesce($5::text, 'NULL'), coalesce($6::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    -- FOR UPDATE first: it waits for every creator in flight under this
    -- grant (fanout._quota_check's key share), so that the quota counts
    -- what they create, and creators that come after see the quota.
    PERFORM 1 FROM fanout.topic_grant g
    WHERE g.pattern = v_pattern AND g.role = $2 AND g.privilege = v_priv FOR UPDATE;
    UPDATE fanout.topic_grant g SET max_topics = $4, max_groups = $5, max_bytes = $6
    WHERE g.pattern = v_pattern AND g.role = $2 AND g.privilege = v_priv;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no grant of % on % to %', v_priv, quote_literal(v_pattern), $2::text
            USING ERRCODE = 'PGQ03', HINT = 'grant it first with fanout.grant_topic()';
    END IF;
    IF $6 IS NULL THEN
        -- The next measuring round recomputes blocks of other grants.
        DELETE FROM fanout.quota_block q WHERE q.pattern = v_pattern
          AND NOT EXISTS (SELECT 1 FROM fanout.topic_grant g WHERE g.pattern = v_pattern AND g.max_bytes IS NOT NULL);
    END IF;
    INSERT INTO fanout.event_log (topic, kind, detail)
    VALUES (v_pattern, 'quota_set', jsonb_build_object('role', $2::text, 'privilege', v_priv,
            'max_topics', $4, 'max_groups', $5, 'max_bytes', $6));
    RETURN true;
END
$fn$;
