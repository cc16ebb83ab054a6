-- fanout._quota_check(p_topic, p_what): raises PGQ25 when one more topic
-- (p_what 'topics': create_topic of the new topic p_topic) or one more
-- consumer group (p_what 'groups': subscribe of a new group to p_topic)
-- would exceed the quota of a grant whose pattern matches p_topic
-- (fanout.set_quota). The quota bounds the pattern's topics whoever holds
-- the grant: a tenant admin that grants a narrower pattern to another role
-- does not escape it. The grants with such a quota are locked FOR NO KEY UPDATE
-- (in key order) before counting, so concurrent creators of one pattern
-- count one after the other and never exceed it together; no tenant can
-- hold those rows (locking them needs UPDATE on fanout.topic_grant).
-- Each such row is then updated (a new version, no value changed), as
-- fanout._lock_row_wait does: the count runs on the caller's snapshot, and
-- a REPEATABLE READ (or SERIALIZABLE) snapshot taken before the previous
-- creator committed would not see its topic or group. Such a caller gets a
-- serialization failure (40001: retry the transaction) instead of counting
-- without it; a row only locked by the previous creator let it through.
-- Raises: PGQ25, 40001 (a REPEATABLE READ or SERIALIZABLE caller whose
-- snapshot predates the last creator's commit under the same quota).
-- Every matching grant is first locked FOR KEY SHARE (fanout.set_quota
-- locks its grant FOR UPDATE): a quota set while a creation is in flight
-- counts it.
-- Tables: fanout.topic_grant, fanout.topic,
-- fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._quota_check(p_topic text, p_what text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    g   record;
    v_n bigint;
BEGIN
    -- Every grant matching the topic, with a quota or not, key share: a
    -- set_quota of one of them (FOR UPDATE) waits for this creator to end,
    -- and this creator for it, so a quota set meanwhile counts this
    -- creation, or this creation sees the quota (the next statement's
    -- snapshot). Without it a creation that had passed no quota and was
    -- still uncommitted when set_quota committed was not counted by the
    -- next creator: two topics under max_topics 1.
    PERFORM 1 FROM fanout.topic_grant q
    WHERE fanout._grant_matches(q.pattern, p_topic)
    ORDER BY q.pattern, q.role, q.privilege
    FOR KEY SHARE;
    FOR g IN
        SELECT q.pattern, q.role, q.privilege, CASE p_what WHEN 'topics' THEN q.max_topics ELSE q.max_groups END AS quota
        FROM fanout.topic_grant q
        WHERE CASE p_what WHEN 'topics' THEN q.max_topics ELSE q.max_groups END IS NOT NULL
          AND fanout._grant_matches(q.pattern, p_topic)
        ORDER BY q.pattern, q.role, q.privilege
        FOR NO KEY UPDATE  -- not FOR UPDATE: no wait for the key share above, of this or another creator
    LOOP
        UPDATE fanout.topic_grant q SET granted_at = q.granted_at
        WHERE q.pattern = g.pattern AND q.role = g.role AND q.privilege = g.privilege;
        IF p_what = 'topics' THEN
            SELECT count(*) INTO v_n FROM fanout.topic t WHERE fanout._grant_matches(g.pattern, t.topic);
        ELSE
            SELECT count(*) INTO v_n FROM fanout.consumer_group c JOIN fanout.topic t ON t.topic_id = c.topic_id
            WHERE c.group_name IS NOT NULL AND fanout._grant_matches(g.pattern, t.topic);
        END IF;
        IF v_n >= g.quota THEN
            -- Not the count: a quota on a wide pattern would tell a tenant
            -- how many topics or groups others have.
            RAISE EXCEPTION 'quota reached: the topics matching % may have at most % % together',
                quote_literal(g.pattern), g.quota, CASE p_what WHEN 'topics' THEN 'topics' ELSE 'consumer groups' END
                USING ERRCODE = 'PGQ25',
                      HINT = CASE p_what WHEN 'topics' THEN 'drop unused topics, or ask the operator to raise the quota (fanout.set_quota)'
                                         ELSE 'remove unused groups (fanout.remove_group), or ask the operator to raise the quota (fanout.set_quota)' END;
        END IF;
    END LOOP;
END
$fn$;
