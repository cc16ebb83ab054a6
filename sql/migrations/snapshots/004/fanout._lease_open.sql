-- fanout._lease_open(p_group_id, p_consumer, p_created, p_expires, p_ids,
-- p_txids, p_atts, p_kpart, p_generation): hands out one page under a new
-- lease (fanout.read, fanout._kpart_read). Reuses a free slot of the group
-- (every message of its last page settled by its holder; none taken away,
-- so that a late ack of that page still finds it and is fenced with PGQ11
-- until cleanup) by one HOT update that moves it to its next page number;
-- inserts a slot only when none is free. Free slots that another session
-- holds locked (an ack in a business transaction) are skipped, never waited
-- for. A slot stops being reused at page 2^16 - 1 (cleanup deletes it).
-- Each page records the server's epoch (fanout._epoch) and the slot's first
-- page of that epoch (fanout._lock_lease fences ids of other epochs).
-- p_slot (a key partition's read passes the slot of the partition's previous
-- page): that slot is tried first, by its key, when it is free. Otherwise
-- every page read of a member storm looked for the group's most recently
-- freed slot (a scan and sort of all the group's slots, on the one index by
-- group), and its 64 owners' reads locked and skipped the same few slots.
-- p_settling (read(..., ack =>) of the caller's previous page, fanout._ack
-- with p_defer): the id of a page this transaction has locked and settled
-- in full without writing it yet; the new page goes into that slot by this
-- one update (the ack's write and the page's in one row version).
-- Returns the new lease id (slot_id * 2^32 + epoch * 2^16 + page_no).
-- Tables: fanout.lease.
CREATE OR REPLACE FUNCTION fanout._lease_open(
    p_group_id bigint, p_consumer text, p_created timestamptz, p_expires timestamptz,
    p_ids bigint[], p_txids xid8[], p_atts int[], p_kpart int DEFAULT NULL, p_generation bigint DEFAULT NULL,
    p_slot bigint DEFAULT NULL, p_settling bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_min   bigint := (SELECT min(x) FROM unnest(p_ids) AS x);
    v_id    bigint;
    v_epoch int := fanout._epoch();
BEGIN
    IF p_settling IS NOT NULL THEN
        UPDATE fanout.lease l
        SET page_no = l.page_no + 1, epoch = v_epoch,
            epoch_since = CASE WHEN l.epoch = v_epoch THEN l.epoch_since ELSE l.page_no + 1 END,
            consumer = p_consumer, created_at = p_created, expires_at = p_expires,
            msg_ids = p_ids, msg_txids = p_txids, attempts = p_atts, settled = '{}', reclaimed = '{}',
            open_count = cardinality(p_ids), min_id = v_min, closed_at = NULL, kpart = p_kpart,
            generation = p_generation
        WHERE l.slot_id = p_settling >> 32 AND l.lease_id = p_settling AND l.group_id = p_group_id
          AND l.reclaimed = '{}' AND l.page_no < 65535
        RETURNING l.lease_id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    IF p_slot IS NOT NULL THEN
        UPDATE fanout.lease l
        SET page_no = l.page_no + 1, epoch = v_epoch,
            epoch_since = CASE WHEN l.epoch = v_epoch THEN l.epoch_since ELSE l.page_no + 1 END,
            consumer = p_consumer, created_at = p_created, expires_at = p_expires,
            msg_ids = p_ids, msg_txids = p_txids, attempts = p_atts, settled = '{}', reclaimed = '{}',
            open_count = cardinality(p_ids), min_id = v_min, closed_at = NULL, kpart = p_kpart,
            generation = p_generation
        WHERE l.slot_id = (SELECT f.slot_id FROM fanout.lease f
                           WHERE f.slot_id = p_slot AND f.group_id = p_group_id AND f.open_count = 0
                             AND f.reclaimed = '{}' AND f.page_no < 65535
                           FOR UPDATE SKIP LOCKED)
          AND l.open_count = 0
        RETURNING l.lease_id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    UPDATE fanout.lease l
    SET page_no = l.page_no + 1, epoch = v_epoch,
        epoch_since = CASE WHEN l.epoch = v_epoch THEN l.epoch_since ELSE l.page_no + 1 END,
        consumer = p_consumer, created_at = p_created, expires_at = p_expires,
        msg_ids = p_ids, msg_txids = p_txids, attempts = p_atts, settled = '{}', reclaimed = '{}',
        open_count = cardinality(p_ids), min_id = v_min, closed_at = NULL, kpart = p_kpart,
        generation = p_generation
    WHERE l.slot_id = (SELECT f.slot_id FROM fanout.lease f
                       WHERE f.group_id = p_group_id AND f.open_count = 0 AND f.reclaimed = '{}'
                         AND f.page_no < 65535
                       ORDER BY f.closed_at DESC
                       LIMIT 1
                       FOR UPDATE SKIP LOCKED)
      AND l.open_count = 0
    RETURNING l.lease_id INTO v_id;
    IF v_id IS NULL THEN
        INSERT INTO fanout.lease AS l (group_id, epoch, consumer, created_at, expires_at, msg_ids, msg_txids,
                                       attempts, open_count, min_id, kpart, generation)
        VALUES (p_group_id, v_epoch, p_consumer, p_created, p_expires, p_ids, p_txids,
                p_atts, cardinality(p_ids), v_min, p_kpart, p_generation)
        RETURNING l.lease_id INTO v_id;
    END IF;
    RETURN v_id;
END
$fn$;
