-- fanout._lease_code(p_id, p_encode): the public lease id of an internal one
-- (p_encode) or back. A page's internal id is slot_id * 2^32 + epoch * 2^16 +
-- page_no (fanout.lease.lease_id); slot ids come from one sequence for every
-- topic, so handing them out as they are let a tenant count the pages other
-- tenants opened. The public id is a keyed permutation of the positive
-- bigints: an unbalanced Feistel network over the 63 bits of a non-negative
-- bigint, a 31-bit half a (bits 32..62) and a 32-bit half b (bits 0..31), six
-- rounds that update a and b in turn, each by XOR with the first 32 bits of
-- sha256(key || int4send(round) || int8send(the other half)) (a keeps 31 of
-- them). Each round is undone by the same XOR, so decoding runs the rounds
-- backwards. The result is never negative; it is 0 for exactly one positive
-- id, which is mapped once more (cycle walking: 0 itself is no id), so every
-- positive id maps to exactly one positive id and back. Six rounds, not four:
-- with random round functions, four rounds are proven indistinguishable from a
-- random permutation only up to about 2^16 ids per key (half the width of a
-- half), six rounds well beyond that, also to a caller who has ids decoded
-- (Patarin's bounds). The key is fanout.lease_key.k, 32 bytes (244 random
-- bits) made at install, readable by pgq's owner only: distinct pages keep
-- distinct ids (fencing is unchanged), and without the key an id says nothing
-- about its slot, page, epoch, topic or any other id. One loop over the
-- rounds, both ways (a round's XOR undoes itself, so decoding is the same loop
-- backwards): a page read costs one encode and an ack one decode, each the
-- first call of its transaction, in which plpgsql prepares every expression
-- the call reaches, so the fewer distinct expressions the cheaper (the six
-- rounds written out cost more per call than the old loop of four). Pure
-- arithmetic: which ids exist is fanout._lease_raw's.
-- Returns NULL for a NULL or non-positive p_id. Tables: fanout.lease_key.
CREATE OR REPLACE FUNCTION fanout._lease_code(p_id bigint, p_encode boolean)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_a   constant bigint := 2147483647;  -- 2^31 - 1
    c_b   constant bigint := 4294967295;  -- 2^32 - 1
    v_key bytea;
    v     bigint := p_id;
    v_a   bigint;
    v_b   bigint;
    v_r   int;
BEGIN
    IF p_id IS NULL OR p_id < 1 THEN
        RETURN NULL;
    END IF;
    SELECT k.k INTO STRICT v_key FROM fanout.lease_key k;
    LOOP  -- twice only when the first result is 0
        v_a := v >> 32;
        v_b := v & c_b;
        FOR i IN 1..6 LOOP
            v_r := CASE WHEN p_encode THEN i ELSE 7 - i END;
            -- Odd rounds change a, even rounds b, by the first 4 bytes of the hash as a bigint.
            IF v_r % 2 = 1 THEN
                v_a := v_a # (('x' || encode(substr(sha256(v_key || int4send(v_r) || int8send(v_b)), 1, 4), 'hex'))
                              ::bit(32)::bigint & c_a);
            ELSE
                v_b := v_b # ('x' || encode(substr(sha256(v_key || int4send(v_r) || int8send(v_a)), 1, 4), 'hex'))
                             ::bit(32)::bigint;
            END IF;
        END LOOP;
        v := (v_a << 32) | v_b;
        EXIT WHEN v > 0;
    END LOOP;
    RETURN v;
END
$fn$;
