-- fanout._lease_code(p_id, p_encode): the public lease id of an internal
-- one (p_encode) or back. A page's internal id is slot_id * 2^32 + epoch *
-- 2^16 + page_no (fanout.lease.lease_id); slot ids come from one sequence
-- for every topic, so handing them out as they are let a tenant count the
-- pages other tenants opened. The public id is a keyed permutation of the
-- positive bigints: a four-round Feistel network over two 32-bit halves
-- (round function: the first 32 bits of sha256(key, round, half)), walked
-- again while its result is not positive (cycle walking), so every
-- positive id maps to exactly one positive id and back. The key is
-- fanout.lease_key.k, 32 bytes (244 random bits) made at install, readable
-- by pgq's owner only: distinct pages keep distinct ids (fencing is unchanged), and
-- without the key an id says nothing about its slot, page, epoch, topic or
-- any other id. Pure arithmetic: which ids exist is fanout._lease_raw's.
-- Returns NULL for a NULL or non-positive p_id. Tables: fanout.lease_key.
CREATE OR REPLACE FUNCTION fanout._lease_code(p_id bigint, p_encode boolean)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_half constant bigint := 4294967295;  -- 2^32 - 1
    v_key  bytea;
    v      bigint := p_id;
    v_l    bigint;
    v_r    bigint;
    v_t    bigint;
    v_h    bytea;
BEGIN
    IF p_id IS NULL OR p_id < 1 THEN
        RETURN NULL;
    END IF;
    SELECT k.k INTO STRICT v_key FROM fanout.lease_key k;
    LOOP
        v_l := (v >> 32) & c_half;
        v_r := v & c_half;
        IF p_encode THEN
            FOR i IN 1..4 LOOP
                v_h := sha256(v_key || int4send(i) || int8send(v_r));
                v_t := v_r;
                v_r := v_l # ((get_byte(v_h, 0)::bigint << 24) | (get_byte(v_h, 1) << 16)
                              | (get_byte(v_h, 2) << 8) | get_byte(v_h, 3));
                v_l := v_t;
            END LOOP;
        ELSE
            FOR i IN REVERSE 4..1 LOOP
                v_h := sha256(v_key || int4send(i) || int8send(v_l));
                v_t := v_l;
                v_l := v_r # ((get_byte(v_h, 0)::bigint << 24) | (get_byte(v_h, 1) << 16)
                              | (get_byte(v_h, 2) << 8) | get_byte(v_h, 3));
                v_r := v_t;
            END LOOP;
        END IF;
        v := (v_l << 32) | v_r;  -- wraps to a negative bigint when bit 63 is set
        EXIT WHEN v > 0;
    END LOOP;
    RETURN v;
END
$fn$;
