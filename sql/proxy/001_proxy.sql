-- 001_proxy.sql — schema fanout_proxy: pgq's SQL API over PL/Proxy, for any
-- language, in the directory database (it reads fanout_directory, so install
-- the directory first). `pgq-shards migrate-proxy` installs it, with its own
-- version table (public.fanout_proxy_version). docs/scaling-out.md.
--
-- Each function runs its fanout counterpart on the shard the directory
-- places the topic on (PL/Proxy cluster 'fanout', partition = the shard's
-- proxy_index); the views run on every shard (RUN ON ALL).
--
-- A PL/Proxy call commits on the shard by itself, whatever the caller's
-- transaction does afterwards. So publish, publish_batch, ack and nack
-- refuse (PGQ27) to run in a transaction that already wrote something here
-- or already made a proxy call: their effect would not roll back with it.
-- What they cannot see (a write after the call in the same transaction, or
-- a write on another database) is the caller's to avoid: a transactional
-- outbox publishes on its shard directly (fanout.publish on the shard's own
-- connection). LISTEN goes to the shard too (fanout.topics' channel, per
-- shard): a NOTIFY is never proxied.

CREATE EXTENSION IF NOT EXISTS plproxy;

-- PL/Proxy's cluster configuration API (schema plproxy): cluster 'fanout'
-- is the directory's shards in proxy_index order; its version is the
-- directory's, so PL/Proxy reloads the partitions after every change.
-- modular_mapping: any number of shards (the partition function returns the
-- shard's index itself). Connection strings must be key=value (PL/Proxy
-- appends user=<current_user> when they name no user).
CREATE SCHEMA IF NOT EXISTS plproxy;

CREATE OR REPLACE FUNCTION plproxy.get_cluster_version(cluster_name text)
RETURNS int4
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF cluster_name = 'fanout' THEN
        RETURN fanout_directory.version();
    END IF;
    RAISE EXCEPTION 'unknown PL/Proxy cluster %', quote_literal(cluster_name) USING ERRCODE = 'PGQ03';
END
$fn$;

CREATE OR REPLACE FUNCTION plproxy.get_cluster_partitions(cluster_name text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF cluster_name = 'fanout' THEN
        RETURN QUERY SELECT s.conninfo FROM fanout_directory.shard s ORDER BY s.proxy_index;
        RETURN;
    END IF;
    RAISE EXCEPTION 'unknown PL/Proxy cluster %', quote_literal(cluster_name) USING ERRCODE = 'PGQ03';
END
$fn$;

CREATE OR REPLACE FUNCTION plproxy.get_cluster_config(cluster_name text, OUT key text, OUT val text)
RETURNS SETOF record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    key := 'modular_mapping';
    val := '1';
    RETURN NEXT;
    key := 'connection_lifetime';
    val := '1800';
    RETURN NEXT;
END
$fn$;

CREATE SCHEMA fanout_proxy;

-- fanout_proxy._partition(topic): the proxy index of the topic's shard.
-- Raises: PGQ03 (NULL topic), PGQ26 (no placement).
-- Tables: fanout_directory.placement, fanout_directory.shard.
CREATE FUNCTION fanout_proxy._partition(topic text)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (fanout_directory.shard_for($1)).proxy_index;
$fn$;

-- fanout_proxy._alone(p_what): refuses (PGQ27) a proxied write in a
-- transaction that already wrote here (it has a transaction id) or already
-- made a proxied write (marked in the transaction-local setting
-- fanout_proxy.xact), then marks this one. Tables: none.
CREATE FUNCTION fanout_proxy._alone(p_what text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL
       OR coalesce(current_setting('fanout_proxy.xact', true), '') <> '' THEN
        RAISE EXCEPTION 'fanout_proxy.% inside a larger transaction', p_what
            USING ERRCODE = 'PGQ27',
                  DETAIL = 'a PL/Proxy call commits on the shard at once: it would not roll back with this transaction',
                  HINT = 'call it in a transaction of its own (autocommit), or call fanout.' || p_what
                         || ' on the shard in the transaction that writes the business data';
    END IF;
    PERFORM set_config('fanout_proxy.xact', p_what, true);
END
$fn$;

-- The PL/Proxy functions proper (underscore names; the public wrappers
-- below check the transaction first). Each calls TARGET on the topic's
-- shard with every argument.

CREATE FUNCTION fanout_proxy._publish(topic text, payload jsonb, headers jsonb, message_group text, notify boolean,
    dedupe_key text, deliver_at timestamptz, delay interval, priority int, sequence bigint)
RETURNS bigint
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    TARGET fanout.publish;
$fn$;

CREATE FUNCTION fanout_proxy._publish_batch(topic text, payloads jsonb[], headers jsonb[], message_groups text[],
    notify boolean, dedupe_keys text[], deliver_at timestamptz, delay interval, priority int, sequences bigint[])
RETURNS SETOF bigint
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    TARGET fanout.publish_batch;
$fn$;

CREATE FUNCTION fanout_proxy._ack(topic text, lease_id bigint, message_ids bigint[])
RETURNS int
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    SELECT fanout.ack(lease_id, message_ids);
$fn$;

CREATE FUNCTION fanout_proxy._nack(topic text, lease_id bigint, message_ids bigint[], retry_in interval, error text)
RETURNS int
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    SELECT fanout.nack(lease_id, message_ids, retry_in, error);
$fn$;

-- fanout_proxy.publish(...): fanout.publish on the topic's shard, in a
-- transaction of its own there. Same parameters and defaults.
-- Raises: PGQ27 (inside a larger transaction), PGQ26 (no placement), and
-- whatever fanout.publish raises on the shard. Tables: as _partition.
CREATE FUNCTION fanout_proxy.publish(
    topic         text,
    payload       jsonb,
    headers       jsonb DEFAULT '{}',
    message_group text DEFAULT NULL,
    notify        boolean DEFAULT NULL,
    dedupe_key    text DEFAULT NULL,
    deliver_at    timestamptz DEFAULT NULL,
    delay         interval DEFAULT NULL,
    priority      int DEFAULT NULL,
    sequence      bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM fanout_proxy._alone('publish');
    RETURN fanout_proxy._publish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);
END
$fn$;

-- fanout_proxy.publish_batch(...): fanout.publish_batch on the topic's
-- shard (one round trip, one transaction there); the ids in input order.
-- Raises: as fanout_proxy.publish.
CREATE FUNCTION fanout_proxy.publish_batch(
    topic          text,
    payloads       jsonb[],
    headers        jsonb[] DEFAULT NULL,
    message_groups text[] DEFAULT NULL,
    notify         boolean DEFAULT NULL,
    dedupe_keys    text[] DEFAULT NULL,
    deliver_at     timestamptz DEFAULT NULL,
    delay          interval DEFAULT NULL,
    priority       int DEFAULT NULL,
    sequences      bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM fanout_proxy._alone('publish_batch');
    RETURN QUERY SELECT fanout_proxy._publish_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);
END
$fn$;

-- fanout_proxy.ack(topic, lease_id, message_ids): fanout.ack on the shard
-- of topic (the lease's topic: a lease id means something only on the
-- shard that issued it). Raises: PGQ27, PGQ26, and what fanout.ack raises.
CREATE FUNCTION fanout_proxy.ack(topic text, lease_id bigint, message_ids bigint[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM fanout_proxy._alone('ack');
    RETURN fanout_proxy._ack($1, $2, $3);
END
$fn$;

-- fanout_proxy.nack(topic, lease_id, message_ids, retry_in, error):
-- fanout.nack on the shard of topic. Raises: as fanout_proxy.ack.
CREATE FUNCTION fanout_proxy.nack(topic text, lease_id bigint, message_ids bigint[] DEFAULT NULL,
                                  retry_in interval DEFAULT '0', error text DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM fanout_proxy._alone('nack');
    RETURN fanout_proxy._nack($1, $2, $3, $4, $5);
END
$fn$;

-- fanout_proxy.read(...): fanout.read on the topic's shard; the lease is
-- the shard's: ack it with fanout_proxy.ack(topic, lease_id).
CREATE FUNCTION fanout_proxy.read(
    topic        text,
    group_name   text DEFAULT NULL,
    consumer     text DEFAULT NULL,
    max_messages int DEFAULT 100,
    lease        interval DEFAULT '30 seconds',
    max_bytes    bigint DEFAULT 16777216,
    partition    int DEFAULT NULL,
    ack          bigint DEFAULT NULL)
RETURNS TABLE(lease_id bigint, message_id bigint, payload jsonb, headers jsonb,
              message_group text, published_at timestamptz, attempt int)
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    TARGET fanout.read;
$fn$;

-- fanout_proxy.create_topic(...): fanout.create_topic on the shard the
-- topic is placed on (place it first). Same parameters and defaults.
CREATE FUNCTION fanout_proxy.create_topic(
    topic                               text,
    semantics                           text DEFAULT 'queue',
    completion                          text DEFAULT 'offset',
    retention                           interval DEFAULT '24 hours',
    zero_subscription_retention         interval DEFAULT '24 hours',
    block_writes_without_subscriptions  boolean DEFAULT false,
    max_retention                       interval DEFAULT '30 days',
    max_attempts                        int DEFAULT 5,
    max_payload_bytes                   int DEFAULT 1048576,
    zombie_ttl                          interval DEFAULT '7 days',
    notify                              boolean DEFAULT true,
    partition_interval                  interval DEFAULT '1 hour',
    dedupe_window                       interval DEFAULT '24 hours',
    sequence_ordering                   boolean DEFAULT false,
    gap_alert_after                     interval DEFAULT '5 minutes',
    partitions                          int DEFAULT NULL,
    whole_transactions                  boolean DEFAULT false)
RETURNS bigint
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    TARGET fanout.create_topic;
$fn$;

-- fanout_proxy.subscribe(...): fanout.subscribe on the topic's shard.
CREATE FUNCTION fanout_proxy.subscribe(
    topic             text,
    group_name        text,
    start_position    text DEFAULT 'latest',
    start_at          timestamptz DEFAULT NULL,
    start_message_id  bigint DEFAULT NULL,
    max_backfill      bigint DEFAULT 1000000,
    heartbeat_timeout interval DEFAULT '5 minutes',
    dead_after_misses int DEFAULT 3,
    backfill_batch    int DEFAULT 10000,
    backfill_scope    text DEFAULT 'pending_only')
RETURNS TABLE(status text, effective_start_message_id bigint, backfill_status text)
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON fanout_proxy._partition(topic);
    TARGET fanout.subscribe;
$fn$;

-- The views, on every shard (RUN ON ALL; one unreachable shard fails the
-- call): one row per row of the shard's view, as (shard, data jsonb), so
-- that a column added to a view upstream needs no change here:
--   SELECT shard, data->>'topic', (data->>'messages')::bigint FROM fanout_proxy.topics();

CREATE FUNCTION fanout_proxy.topics(OUT shard text, OUT data jsonb)
RETURNS SETOF record
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON ALL;
    SELECT current_setting('fanout.shard', true) AS shard, to_jsonb(v) AS data FROM fanout.topics v;
$fn$;

CREATE FUNCTION fanout_proxy.groups(OUT shard text, OUT data jsonb)
RETURNS SETOF record
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON ALL;
    SELECT current_setting('fanout.shard', true) AS shard, to_jsonb(v) AS data FROM fanout.groups v;
$fn$;

CREATE FUNCTION fanout_proxy.dead_letters(OUT shard text, OUT data jsonb)
RETURNS SETOF record
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON ALL;
    SELECT current_setting('fanout.shard', true) AS shard, to_jsonb(v) AS data FROM fanout.dead_letters v;
$fn$;

CREATE FUNCTION fanout_proxy.partitions(OUT shard text, OUT data jsonb)
RETURNS SETOF record
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON ALL;
    SELECT current_setting('fanout.shard', true) AS shard, to_jsonb(v) AS data FROM fanout.partitions v;
$fn$;

CREATE FUNCTION fanout_proxy.sequence_gaps(OUT shard text, OUT data jsonb)
RETURNS SETOF record
LANGUAGE plproxy
AS $fn$
    CLUSTER 'fanout';
    RUN ON ALL;
    SELECT current_setting('fanout.shard', true) AS shard, to_jsonb(v) AS data FROM fanout.sequence_gaps v;
$fn$;

REVOKE ALL ON SCHEMA fanout_proxy FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA fanout_proxy FROM PUBLIC;
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fanout_proxy_user') THEN
        CREATE ROLE fanout_proxy_user NOLOGIN;
    END IF;
END
$roles$;
GRANT fanout_directory_reader TO fanout_proxy_user;
GRANT USAGE ON SCHEMA fanout_proxy TO fanout_proxy_user;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA fanout_proxy TO fanout_proxy_user;
