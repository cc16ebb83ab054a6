-- fanout._topic(p_topic): the catalog row of a topic by name (callers that
-- change it lock it themselves: a STABLE function cannot). Names are looked up
-- in NFC (fanout._nfc). On a shard of a sharded deployment (the database
-- setting fanout.shard names the shard: docs/scaling-out.md) a missing topic
-- is PGQ26 instead, so that a client routed by a stale directory re-reads
-- it; the setting is read only on that path, so a found topic, and every
-- call of an unsharded database, costs what it did.
-- Raises: PGQ03 (NULL name), PGQ01 (no such topic), PGQ26 (no such topic on
-- this shard). Reads fanout.topic.
CREATE OR REPLACE FUNCTION fanout._topic(p_topic text)
RETURNS fanout.topic
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t fanout.topic;
BEGIN
    IF p_topic IS NULL THEN
        RAISE EXCEPTION 'topic must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic = fanout._nfc(p_topic);
    IF v_t.topic_id IS NULL THEN
        IF coalesce(current_setting('fanout.shard', true), '') <> '' THEN
            RAISE EXCEPTION 'topic % is not on shard %', quote_literal(p_topic), current_setting('fanout.shard')
                USING ERRCODE = 'PGQ26', HINT = 're-read the directory (fanout_directory.shard_for) and call the shard it names';
        END IF;
        RAISE EXCEPTION 'topic % does not exist', quote_literal(p_topic)
            USING ERRCODE = 'PGQ01', HINT = 'create it with fanout.create_topic()';
    END IF;
    RETURN v_t;
END
$fn$;
