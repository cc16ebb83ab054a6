-- fanout.read(topic, group_name, consumer, max_messages, lease, max_bytes,
-- partition, ack): claims up to max_messages for the caller under one new
-- lease, in this order:
--   1. un-acked messages of the group's expired leases (their attempt grows;
--      the old lease can no longer ack them: fencing),
--   2. nacked messages whose retry time has come,
--   3. the next page of the group's stream (fanout._window_walk: by
--      priority level once the topic has priorities; on a
--      sequence-ordered topic filtered by fanout._sequence_gate), which
--      also stops before max_bytes (payload + headers + message_group of
--      the page's messages, uncompressed; default 16 MiB): the first message
--      of a page always comes, so no message can make a page impossible.
--      (Redelivered messages of steps 1 and 2 count toward max_messages; each
--      was within the max_bytes of the read that first delivered it.)
-- A message whose delivery would exceed the topic's max_attempts goes to the
-- group's dead letters instead. Members of one group never hold the same
-- message under unexpired leases. Counts as a heartbeat of group and consumer.
-- An idle poll (nothing to hand out, heartbeat fresh) locks and writes nothing
-- (checked first only when the session's previous read of the group was empty).
-- The page is made by fanout._group_read, or on a partitioned topic
-- (create_topic(..., partitions => P)) by fanout._kpart_claim: one page of
-- one key partition the consumer owns, or, with partition => k, of
-- partition k (explicit assignment); its rows are returned here.
-- ack => lease_id first acks that lease (the caller's previous page of this
-- topic and group) as fanout.ack(lease_id) would: a consumer loop then costs
-- one round trip and one commit per page instead of two. If the ack fails
-- (PGQ10, PGQ11, ...) the read fails with it: nothing is acked or read. A
-- lease of another topic or group is refused as one that does not exist
-- (PGQ10, the same text).
-- Must run in READ COMMITTED (the default) so that each statement sees what
-- the previous reader of the group committed.
-- Returns one row per message: lease_id, message_id, payload, headers,
-- message_group, published_at, attempt (1 on first delivery).
-- Raises: PGQ01, PGQ03 (max_messages not in 1..10000, lease not in
-- (0, 24 hours], max_bytes not in 1..536870912), PGQ04 bad consumer name,
-- PGQ09 isolation level, PGQ03 partition out of range or on an unpartitioned
-- topic, PGQ24 (mixing explicit and automatic partition reads), PGQ13, PGQ14, PGQ16 (see fanout._lock_group), PGQ21
-- (no consume grant), PGQ22 (a new consumer beyond 10,000 members); with
-- ack: PGQ10 (also a lease of another topic or group), and those of
-- fanout.ack.
-- Tables: fanout.topic, fanout.consumer_group, fanout.member, fanout.lease,
-- fanout.retry, fanout.dead_letter, fanout.partition, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout.read(
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
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
-- Index look-ups whatever the statistics say: the catalog tables start empty
-- and a session's cached plans outlive their growth (a plan made while
-- fanout.lease was empty scanned every lease on every read). The disabled
-- paths' costs must not trigger JIT compilation either.
SET enable_seqscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    p_topic     ALIAS FOR $1;
    p_group     ALIAS FOR $2;
    p_consumer  ALIAS FOR $3;
    p_max       ALIAS FOR $4;
    p_lease     ALIAS FOR $5;
    p_max_bytes ALIAS FOR $6;
    v_t         fanout.topic;
    v_now       timestamptz := clock_timestamp();
    v_p         record;
    v_other     boolean;
    v_defer     bigint;     -- the acked page whose slot the next page takes (fanout._ack, p_defer)
    v_settled   bigint[];
    v_raw       bigint;     -- ack's internal id
    v_gname     text;       -- the group's stored name (NFC; NULL on a queue)
BEGIN
    v_t := fanout._enter_topic(p_topic, 'consume');
    IF p_max IS NULL OR p_max < 1 OR p_max > 10000 THEN
        RAISE EXCEPTION 'max_messages must be between 1 and 10000, got %', coalesce(p_max::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '24 hours' THEN
        RAISE EXCEPTION 'lease must be a positive interval of at most 24 hours, got %', coalesce(p_lease::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_max_bytes IS NULL OR p_max_bytes < 1 OR p_max_bytes > 536870912 THEN
        RAISE EXCEPTION 'max_bytes must be between 1 and 536870912, got %', coalesce(p_max_bytes::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_consumer IS NOT NULL THEN
        p_consumer := fanout._check_name('consumer', p_consumer);  -- NFC, as heartbeat stores it
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'fanout.read must run in READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'PGQ09';
    END IF;
    IF $7 IS NOT NULL AND v_t.partitions IS NULL THEN
        RAISE EXCEPTION 'topic % is not partitioned; read(..., partition => k) needs a partitioned topic',
            quote_literal(p_topic) USING ERRCODE = 'PGQ03';
    END IF;
    IF $8 IS NOT NULL THEN
        -- The slot must exist now: a slot's group never changes, but a slot
        -- made after this check (another topic's next read) would be acked
        -- below without a grant check. A lease of another topic or group
        -- is refused with the text of a lease that does not exist: the
        -- answer must not tell another tenant's lease from no lease.
        v_raw := fanout._lease_raw($8);  -- the internal id (fanout._lease_code)
        v_gname := CASE WHEN v_t.semantics = 'pubsub' THEN fanout._nfc(p_group) END;
        IF v_t.partitions IS NULL THEN
            -- One statement: the lease's slot is one of this group's, and
            -- the group row is locked before the lease's, as the read below
            -- and seek, pause and unsubscribe (fanout._release_holds) take
            -- them: acking first, then queueing for the group row behind a
            -- seek that waits for the lease, was a deadlock.
            SELECT l.slot_id IS NULL INTO v_other
            FROM fanout.consumer_group g
            LEFT JOIN fanout.lease l ON l.slot_id = v_raw >> 32 AND l.group_id = g.group_id
            WHERE g.topic_id = v_t.topic_id AND g.group_name IS NOT DISTINCT FROM v_gname
            FOR NO KEY UPDATE OF g;
        ELSE
            SELECT g.topic_id <> v_t.topic_id OR g.group_name IS DISTINCT FROM v_gname
            INTO v_other
            FROM fanout.lease l JOIN fanout.consumer_group g ON g.group_id = l.group_id
            WHERE l.slot_id = v_raw >> 32;
        END IF;
        IF NOT FOUND OR v_other THEN
            RAISE EXCEPTION 'lease % does not exist', $8
                USING ERRCODE = 'PGQ10', HINT = 'it was never issued, or it was settled long ago and cleaned up';
        END IF;
        -- The grant was checked above. Unpartitioned: the acked page's slot
        -- is written once, with the next page (fanout._ack's p_defer).
        SELECT a.o_defer, a.o_targets INTO v_defer, v_settled
        FROM fanout._ack($8, NULL, true, v_t.partitions IS NULL, v_raw) a;
    END IF;
    IF v_t.partitions IS NOT NULL THEN
        SELECT * INTO v_p FROM fanout._kpart_claim(v_t, p_group, p_consumer, p_max, p_lease, p_max_bytes, $7, v_now);
    ELSE
        SELECT * INTO v_p FROM fanout._group_read(v_t, p_group, p_consumer, p_max, p_lease, p_max_bytes, v_now,
                                                  v_defer);
        IF v_defer IS NOT NULL AND v_p.o_folded IS NOT TRUE THEN
            PERFORM fanout._lease_settle(v_defer, v_settled, false, true);
        END IF;
    END IF;
    IF v_p.o_lease_id IS NULL THEN
        RETURN;
    END IF;
    -- The page's rows, taken-over and retried messages first: one index
    -- look-up each, by the topic's m<id>_rows (a plan cached per session).
    RETURN QUERY EXECUTE format('SELECT * FROM fanout_data.%I($1, $2, $3, $4)', v_t.data_table || '_rows')
        USING fanout._lease_code(v_p.o_lease_id, true), v_p.o_ids, v_p.o_txids, v_p.o_atts;
END
$fn$;
