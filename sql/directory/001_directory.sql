-- 001_directory.sql — the shard directory (schema fanout_directory): which
-- pgq database (shard) holds which topics. It lives in a small catalog
-- database of its own, never in a shard: `pgq-shards migrate-directory`
-- installs it, with its own version table (public.fanout_directory_version),
-- so the tern migrations of schema fanout and their upgrade workflow are not
-- involved. docs/scaling-out.md.
--
-- A placement maps a pattern to a shard: a topic name ('orders.eu') or a
-- prefix ending in '%' ('acme.%': a tenant's topics, kept beside its
-- business data). The most specific placement wins: an exact name before any
-- prefix, a longer prefix before a shorter one; '%' alone is the default.
-- Every change bumps one version number, which clients and the PL/Proxy
-- cluster (sql/proxy) compare to re-read their cached copy.

CREATE SCHEMA fanout_directory;
REVOKE ALL ON SCHEMA fanout_directory FROM PUBLIC;

-- One row per shard: a whole pgq database (schema fanout, its own sidecar).
-- conninfo is a libpq connection string or URL without a password (clients
-- add credentials: .pgpass, a service file, or their own pool settings).
-- proxy_index numbers the shards 0..n-1 for PL/Proxy's partition list.
CREATE TABLE fanout_directory.shard (
    shard       text PRIMARY KEY CHECK (shard ~ '^[a-z0-9_]{1,63}$'),
    conninfo    text NOT NULL,
    proxy_index int NOT NULL UNIQUE CHECK (proxy_index >= 0),
    added_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fanout_directory.placement (
    pattern   text PRIMARY KEY CHECK (length(pattern) BETWEEN 1 AND 200 AND strpos(left(pattern, -1), '%') = 0),
    shard     text NOT NULL REFERENCES fanout_directory.shard,
    placed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON fanout_directory.placement (shard);

-- The one row that holds the version (int4: PL/Proxy's cluster version type).
CREATE TABLE fanout_directory.meta (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version  int NOT NULL DEFAULT 1
);
INSERT INTO fanout_directory.meta DEFAULT VALUES;

-- fanout_directory._bump(): statement trigger of shard and placement: the
-- version goes up by one in the changing transaction (the row lock orders
-- concurrent changes). Tables: fanout_directory.meta.
CREATE FUNCTION fanout_directory._bump()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
BEGIN
    UPDATE fanout_directory.meta SET version = version + 1;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER bump AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fanout_directory.shard
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_directory._bump();
CREATE TRIGGER bump AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fanout_directory.placement
    FOR EACH STATEMENT EXECUTE FUNCTION fanout_directory._bump();

-- fanout_directory.add_shard(shard, conninfo): registers a shard (or changes
-- its connection string) and returns its proxy index. The shard's database
-- must also say its name (ALTER DATABASE ... SET fanout.shard = 'name', which
-- `pgq-shards add-shard` does) so that it answers PGQ26 for topics it lacks.
-- Raises: PGQ03 (NULL or invalid name or conninfo).
-- Tables: fanout_directory.shard.
CREATE FUNCTION fanout_directory.add_shard(shard text, conninfo text)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
DECLARE
    v_idx int;
BEGIN
    IF $1 IS NULL OR $1 !~ '^[a-z0-9_]{1,63}$' THEN
        RAISE EXCEPTION 'shard name % is not valid', quote_nullable($1)
            USING ERRCODE = 'PGQ03', HINT = 'use 1 to 63 of a-z, 0-9 and _';
    END IF;
    IF $2 IS NULL OR btrim($2) = '' THEN
        RAISE EXCEPTION 'conninfo of shard % must not be empty', $1 USING ERRCODE = 'PGQ03';
    END IF;
    LOCK TABLE fanout_directory.shard IN SHARE ROW EXCLUSIVE MODE;  -- one new index at a time
    INSERT INTO fanout_directory.shard AS s (shard, conninfo, proxy_index)
    VALUES ($1, $2, (SELECT coalesce(max(proxy_index) + 1, 0) FROM fanout_directory.shard))
    ON CONFLICT ON CONSTRAINT shard_pkey DO UPDATE SET conninfo = excluded.conninfo
        WHERE s.conninfo IS DISTINCT FROM excluded.conninfo
    RETURNING s.proxy_index INTO v_idx;
    IF v_idx IS NULL THEN
        SELECT s.proxy_index INTO v_idx FROM fanout_directory.shard s WHERE s.shard = $1;
    END IF;
    RETURN v_idx;
END
$fn$;

-- fanout_directory.place(pattern, shard): places a topic name or a prefix
-- ('tenant.%') on a shard, replacing its previous placement. Moving a
-- pattern whose topics already hold messages is a drain-and-switch
-- (docs/scaling-out.md): new messages go to the new shard once clients see
-- the new version; the old shard keeps serving reads of what it holds.
-- Raises: PGQ03 (NULL or invalid pattern, unknown shard).
-- Tables: fanout_directory.placement, fanout_directory.shard.
CREATE FUNCTION fanout_directory.place(pattern text, shard text)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
DECLARE
    v_version int;
BEGIN
    IF $1 IS NULL OR length($1) NOT BETWEEN 1 AND 200 OR strpos(left($1, -1), '%') > 0 THEN
        RAISE EXCEPTION 'placement pattern % is not valid', quote_nullable($1)
            USING ERRCODE = 'PGQ03', HINT = 'a topic name, or a prefix ending in %';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fanout_directory.shard s WHERE s.shard = $2) THEN
        RAISE EXCEPTION 'shard % is not in the directory', quote_nullable($2)
            USING ERRCODE = 'PGQ03', HINT = 'add it first: fanout_directory.add_shard(shard, conninfo)';
    END IF;
    INSERT INTO fanout_directory.placement AS p (pattern, shard) VALUES ($1, $2)
    ON CONFLICT ON CONSTRAINT placement_pkey DO UPDATE SET shard = excluded.shard, placed_at = now()
        WHERE p.shard IS DISTINCT FROM excluded.shard;
    SELECT m.version INTO v_version FROM fanout_directory.meta m;
    RETURN v_version;
END
$fn$;

-- fanout_directory.unplace(pattern): removes a placement; returns whether
-- one existed. Tables: fanout_directory.placement.
CREATE FUNCTION fanout_directory.unplace(pattern text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
    WITH d AS (DELETE FROM fanout_directory.placement p WHERE p.pattern = $1 RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM d);
$fn$;

-- fanout_directory.shard_for(topic): the shard a topic is placed on (the
-- most specific placement: exact name, then the longest matching prefix).
-- Raises: PGQ03 (NULL topic), PGQ26 (no placement matches: no shard owns
-- the topic; place it or a prefix of it, or place '%' as the default).
-- Tables: fanout_directory.placement, fanout_directory.shard.
CREATE FUNCTION fanout_directory.shard_for(topic text, OUT shard text, OUT conninfo text, OUT proxy_index int,
                                           OUT version int)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'topic must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    SELECT s.shard, s.conninfo, s.proxy_index INTO shard, conninfo, proxy_index
    FROM fanout_directory.placement p
    JOIN fanout_directory.shard s ON s.shard = p.shard
    WHERE p.pattern = $1
       OR (right(p.pattern, 1) = '%' AND starts_with($1, left(p.pattern, -1)))
    ORDER BY (p.pattern = $1) DESC, length(p.pattern) DESC
    LIMIT 1;
    IF shard IS NULL THEN
        RAISE EXCEPTION 'topic % is placed on no shard', quote_literal($1)
            USING ERRCODE = 'PGQ26', HINT = 'place it: fanout_directory.place(pattern, shard)';
    END IF;
    SELECT m.version INTO version FROM fanout_directory.meta m;
END
$fn$;

-- fanout_directory.config(): the whole directory as one JSON document, read
-- in one statement (one snapshot): {"version": n, "shards": {name:
-- {"conninfo": ..., "proxy_index": i}}, "placements": {pattern: shard}}.
-- What the Go client (client.NewSharded) caches.
-- Tables: fanout_directory.meta, fanout_directory.shard,
-- fanout_directory.placement.
CREATE FUNCTION fanout_directory.config()
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
    SELECT jsonb_build_object(
        'version', (SELECT m.version FROM fanout_directory.meta m),
        'shards', coalesce((SELECT jsonb_object_agg(s.shard, jsonb_build_object('conninfo', s.conninfo,
                                                                                'proxy_index', s.proxy_index))
                            FROM fanout_directory.shard s), '{}'),
        'placements', coalesce((SELECT jsonb_object_agg(p.pattern, p.shard) FROM fanout_directory.placement p), '{}'));
$fn$;

-- fanout_directory.version(): the directory's version (a cheap poll).
CREATE FUNCTION fanout_directory.version()
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout_directory, pg_temp
AS $fn$
    SELECT m.version FROM fanout_directory.meta m;
$fn$;

-- Readers (clients, sidecars, the proxy) need only these.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fanout_directory_reader') THEN
        CREATE ROLE fanout_directory_reader NOLOGIN;
    END IF;
END
$roles$;
GRANT USAGE ON SCHEMA fanout_directory TO fanout_directory_reader;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA fanout_directory FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fanout_directory.shard_for(text), fanout_directory.config(),
    fanout_directory.version() TO fanout_directory_reader;
GRANT SELECT ON fanout_directory.shard, fanout_directory.placement, fanout_directory.meta TO fanout_directory_reader;
