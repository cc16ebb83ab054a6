-- 002_move.sql — moving a topic between shards (drain-and-switch,
-- docs/scaling-out.md): the topic is placed on its new shard by its exact
-- name, and a row here says which shard still holds its older messages
-- until every group has drained them there. Clients publish to the new
-- shard and read the old one first while the row exists. The row goes (and
-- the version moves on) when `pgq-shards` (shards.FinishMove) has seen the
-- old shard sealed and drained.

CREATE TABLE fanout_directory.draining (
    topic      text PRIMARY KEY,
    from_shard text NOT NULL REFERENCES fanout_directory.shard,
    since      timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER bump AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fanout_directory.draining
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_directory._bump();

-- fanout_directory.move(topic, shard): places topic on shard by its exact
-- name and, when it was on another shard, records that shard as draining
-- (one move at a time per topic). Returns the shard it moved from (NULL if
-- it was there already).
-- Raises: PGQ03 (as place; a move of a topic still draining), PGQ26 (the
-- topic was placed nowhere).
-- Tables: fanout_directory.placement, fanout_directory.draining.
CREATE FUNCTION fanout_directory.move(topic text, shard text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
DECLARE
    v_from text;
BEGIN
    LOCK TABLE fanout_directory.placement IN SHARE ROW EXCLUSIVE MODE;  -- moves one at a time
    v_from := (fanout_directory.shard_for($1)).shard;
    IF v_from = $2 THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM fanout_directory.draining d WHERE d.topic = $1) THEN
        RAISE EXCEPTION 'topic % is still draining on its previous shard', quote_literal($1)
            USING ERRCODE = 'PGQ03', HINT = 'finish that move first (pgq-shards finish-move)';
    END IF;
    PERFORM fanout_directory.place($1, $2);
    INSERT INTO fanout_directory.draining (topic, from_shard) VALUES ($1, v_from);
    RETURN v_from;
END
$fn$;

-- fanout_directory.drained(topic): the move of topic is over: its previous
-- shard holds nothing any group still needs. Returns whether it was
-- draining. Tables: fanout_directory.draining.
CREATE FUNCTION fanout_directory.drained(topic text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
    WITH d AS (DELETE FROM fanout_directory.draining x WHERE x.topic = $1 RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM d);
$fn$;

-- config() now also lists the draining topics: "draining": {topic: shard}.
CREATE OR REPLACE FUNCTION fanout_directory.config()
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
    SELECT jsonb_build_object(
        'version', (SELECT m.version FROM fanout_directory.meta m),
        'shards', coalesce((SELECT jsonb_object_agg(s.shard, jsonb_build_object('conninfo', s.conninfo,
                                                                                'proxy_index', s.proxy_index))
                            FROM fanout_directory.shard s), '{}'),
        'placements', coalesce((SELECT jsonb_object_agg(p.pattern, p.shard) FROM fanout_directory.placement p), '{}'),
        'draining', coalesce((SELECT jsonb_object_agg(d.topic, d.from_shard) FROM fanout_directory.draining d), '{}'));
$fn$;

REVOKE EXECUTE ON FUNCTION fanout_directory.move(text, text), fanout_directory.drained(text) FROM PUBLIC;
GRANT SELECT ON fanout_directory.draining TO fanout_directory_reader;
