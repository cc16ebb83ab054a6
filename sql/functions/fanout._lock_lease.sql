-- fanout._lock_lease(p_lease_id, p_checked, p_raw): the lease's slot row,
-- locked FOR UPDATE (so that an ack and a takeover by another reader are
-- serialised). p_lease_id is the public id read returned; it is decoded here,
-- once (fanout._lease_raw; p_raw: the caller decoded it, read(..., ack =>),
-- whose check of the slot must see the same id), to the internal id slot_id *
-- 2^32 + epoch * 2^16 + page_no (fanout._lease_open) that the row holds, and
-- the row comes back with that internal id; messages name the id as presented.
-- An earlier page of the slot, of the slot's current epoch or before it, was
-- settled in full by its holder, since a slot with anything taken away is
-- never reused: it comes back unlocked as an empty page (no messages,
-- open_count 0; acking or nacking it again settles nothing), so that a late
-- re-ack never waits for the slot's current holder. A page number of the
-- slot's current epoch (from epoch_since on) presented with another epoch was
-- handed out by a server whose history was lost (an asynchronous failover, or
-- a crash that lost committed transactions): the same page went out again
-- since, or will, and the stale holder is fenced (PGQ11). So is a page number
-- the slot has not reached when the id's epoch is not the running server's.
-- Records the lease's consumer as alive (fanout._touch_member; not for
-- read(..., ack =>), p_checked, whose read records its own consumer). The
-- caller must be allowed to consume the lease's topic (fanout._authorize),
-- checked before the lock so that another tenant cannot even block the lease
-- (a slot that does not exist at the check is PGQ10 at once, so that one made
-- after it is never locked unchecked); a lease of a topic the caller may not
-- consume is refused as one that does not exist (PGQ10, the same text):
-- another tenant's lease is not told apart from no lease. Not checked again
-- when the caller has checked it (p_checked: read(..., ack =>), which consumes
-- the lease's topic and group), nor when this transaction wrote the slot's row
-- (the read that handed the page out, or an earlier ack of it, checked it in
-- this transaction). Nothing is remembered past the transaction: a grant
-- revoked before the next transaction refuses its ack.
-- Raises: PGQ03 NULL id, PGQ10 unknown lease (no such slot, a page the
-- slot has not reached, an id that decodes to no lease, or a lease of a
-- topic the caller may not consume), PGQ11 a page of a lost history.
-- Tables: fanout.lease, fanout.lease_key, fanout.consumer_group, fanout.topic, fanout.member.
CREATE OR REPLACE FUNCTION fanout._lock_lease(p_lease_id bigint, p_checked boolean DEFAULT false,
                                              p_raw bigint DEFAULT NULL)
RETURNS fanout.lease
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_l     fanout.lease;
    v_id    bigint := coalesce(p_raw, fanout._lease_raw(p_lease_id));  -- the internal id; NULL: none
    v_epoch int := (v_id >> 16) & 65535;
    v_page  bigint := v_id & 65535;
    v_topic text;
    v_check boolean;
    v_caller text;
BEGIN
    IF p_lease_id IS NULL THEN
        RAISE EXCEPTION 'lease_id must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF NOT p_checked THEN
        SELECT t.topic, l.xmin IS DISTINCT FROM pg_current_xact_id_if_assigned()::xid
                        OR current_setting('fanout.xact_caller', true) IS DISTINCT FROM fanout._caller()::text
        INTO v_topic, v_check
        FROM fanout.lease l
        JOIN fanout.consumer_group g ON g.group_id = l.group_id
        JOIN fanout.topic t ON t.topic_id = g.topic_id
        WHERE l.slot_id = v_id >> 32;
        IF NOT FOUND THEN
            -- No slot now: one made after this check (another topic's next
            -- read) must not be locked below unchecked.
            RAISE EXCEPTION 'lease % does not exist', p_lease_id
                USING ERRCODE = 'PGQ10', HINT = 'it was never issued, or it was settled long ago and cleaned up';
        END IF;
        IF v_check THEN
            -- Refused as a lease that does not exist: neither the lease's
            -- topic nor that the id is a lease at all is told to a role
            -- that may not consume its topic.
            IF NOT fanout._may(v_topic, 'consume') THEN
                RAISE EXCEPTION 'lease % does not exist', p_lease_id
                    USING ERRCODE = 'PGQ10', HINT = 'it was never issued, or it was settled long ago and cleaned up';
            END IF;
            -- As fanout._authorize notes the caller allowed (one _may call).
            v_caller := fanout._caller()::text;
            IF current_setting('fanout.xact_caller', true) IS DISTINCT FROM v_caller THEN
                PERFORM set_config('fanout.xact_caller',
                                   CASE WHEN coalesce(current_setting('fanout.xact_caller', true), '') = ''
                                        THEN v_caller ELSE '0' END, true);
            END IF;
        END IF;
    END IF;
    -- The slot's current page, locked; else (no lock) what the slot holds.
    SELECT * INTO v_l FROM fanout.lease l
    WHERE l.slot_id = v_id >> 32 AND l.lease_id = v_id FOR UPDATE;
    IF NOT FOUND THEN
        SELECT * INTO v_l FROM fanout.lease l WHERE l.slot_id = v_id >> 32;
        IF v_l.lease_id = v_id THEN
            -- Handed out just now (after the statement above began).
            SELECT * INTO v_l FROM fanout.lease l WHERE l.slot_id = v_id >> 32 FOR UPDATE;
        END IF;
    END IF;
    IF v_l.lease_id IS DISTINCT FROM v_id AND v_id > 0 AND v_l.slot_id IS NOT NULL
       AND ((v_page BETWEEN v_l.epoch_since AND v_l.page_no AND v_epoch <> v_l.epoch)
            OR (v_page > v_l.page_no AND v_epoch <> fanout._epoch())) THEN
        RAISE EXCEPTION 'lease % was handed out by a server whose history was lost', p_lease_id
            USING ERRCODE = 'PGQ11',
                  HINT = 'a failover or crash rolled its page back; its messages are handed out again: roll back';
    END IF;
    IF v_l.slot_id IS NULL OR v_page NOT BETWEEN 1 AND v_l.page_no OR v_id IS NULL THEN
        RAISE EXCEPTION 'lease % does not exist', p_lease_id
            USING ERRCODE = 'PGQ10', HINT = 'it was never issued, or it was settled long ago and cleaned up';
    END IF;
    IF v_l.lease_id <> v_id THEN
        -- An earlier page of the slot: settled in full, nothing left of it.
        v_l.lease_id := v_id;
        v_l.page_no := v_page;
        v_l.msg_ids := '{}';
        v_l.msg_txids := '{}';
        v_l.attempts := '{}';
        v_l.settled := '{}';
        v_l.reclaimed := '{}';
        v_l.open_count := 0;
        v_l.kpart := NULL;
        v_l.generation := NULL;
        RETURN v_l;
    END IF;
    IF v_l.consumer IS NOT NULL AND NOT p_checked THEN
        -- Acks, nacks and extensions are signs of life too (throttled per
        -- member); read(..., ack =>) records its own consumer instead.
        PERFORM fanout._touch_member(v_l.group_id, v_l.consumer, clock_timestamp());
    END IF;
    RETURN v_l;
END
$fn$;
