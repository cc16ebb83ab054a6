-- fanout._lease_code(p_id, p_encode): the public lease id of an internal one
-- (p_encode) or back. Internally a page is slot_id * 2^32 + epoch * 2^16 +
-- page_no (fanout.lease.raw_id); slot ids come from one sequence for every
-- topic, so handing them out as they are let a tenant count the pages other
-- tenants opened. The public id is 2^62 + a keyed permutation of the 62-bit
-- internal id (a four-round Feistel network over two 31-bit halves whose
-- round function is the first 31 bits of sha256(key, round, half); the key
-- is fanout.lease_key.k, 32 random bytes made at install, readable by
-- pgq's owner only): distinct pages keep distinct ids (fencing is
-- unchanged), and without the key an id says nothing about its slot, page,
-- epoch, topic or any other id (docs/architecture.md, "What a lease id
-- reveals").
-- Decoding: an id with bit 62 set is inverted; an id below 2^62 is one of
-- release 0.1.0's (the internal id itself), accepted only for the slots that
-- existed when the upgrade ran (fanout.lease_key.legacy_max; none on a fresh
-- install), so that a client of that release acking across the upgrade is
-- still served. Anything else (NULL, negative, a 0.1.0-style id of a later
-- slot) decodes to NULL: the callers raise PGQ10, as for an unknown lease.
-- Returns the other form. Tables: fanout.lease_key.
CREATE OR REPLACE FUNCTION fanout._lease_code(p_id bigint, p_encode boolean)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_half constant bigint := 2147483647;           -- 2^31 - 1
    c_flag constant bigint := 4611686018427387904;  -- 2^62
    v_key  bytea;
    v_max  bigint;
    v_l    bigint;
    v_r    bigint;
    v_t    bigint;
    v_h    bytea;
BEGIN
    IF p_id IS NULL OR p_id < 0 THEN
        RETURN NULL;
    END IF;
    SELECT k.k, k.legacy_max INTO v_key, v_max FROM fanout.lease_key k;
    IF p_encode THEN
        v_l := p_id >> 31;
        v_r := p_id & c_half;
        FOR i IN 1..4 LOOP
            v_h := sha256(v_key || int4send(i) || int4send(v_r::int));
            v_t := v_r;
            v_r := v_l # (((get_byte(v_h, 0) & 127)::bigint << 24) | (get_byte(v_h, 1) << 16)
                          | (get_byte(v_h, 2) << 8) | get_byte(v_h, 3));
            v_l := v_t;
        END LOOP;
        RETURN c_flag | (v_l << 31) | v_r;
    END IF;
    IF p_id < c_flag THEN
        RETURN CASE WHEN p_id >> 32 BETWEEN 1 AND v_max THEN p_id END;  -- release 0.1.0's form
    END IF;
    v_l := (p_id >> 31) & c_half;
    v_r := p_id & c_half;
    FOR i IN REVERSE 4..1 LOOP
        v_h := sha256(v_key || int4send(i) || int4send(v_l::int));
        v_t := v_l;
        v_l := v_r # (((get_byte(v_h, 0) & 127)::bigint << 24) | (get_byte(v_h, 1) << 16)
                      | (get_byte(v_h, 2) << 8) | get_byte(v_h, 3));
        v_r := v_t;
    END LOOP;
    RETURN (v_l << 31) | v_r;
END
$fn$;
