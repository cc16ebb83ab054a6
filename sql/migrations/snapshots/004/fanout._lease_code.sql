-- fanout._lease_code(p_id, p_encode): the public lease id of an internal
-- one (p_encode) or back. A page's internal id is slot_id * 2^32 + epoch *
-- 2^16 + page_no (fanout.lease.lease_id); slot ids come from one sequence
-- for every topic, so handing them out as they are let a tenant count the
-- pages other tenants opened. The public id is a keyed permutation of the
-- positive bigints: an unbalanced Feistel network over the 63 bits of a
-- non-negative bigint, a 31-bit half a (bits 32..62) and a 32-bit half b
-- (bits 0..31), six rounds that update a and b in turn, each by XOR with
-- the first 32 bits of sha256(key, round, the other half) (a keeps 31 of
-- them). Each round is undone by the same XOR, so decoding runs the rounds
-- backwards. The result is never negative; it is 0 for exactly one positive
-- id, which is mapped once more (cycle walking: 0 itself is no id), so every
-- positive id maps to exactly one positive id and back. Six rounds, not
-- four: a Feistel network with random round functions is indistinguishable
-- from a random permutation, to a caller who may also have ids decoded,
-- while it sees far fewer than 2^31 ids per key (four rounds: 2^16). The
-- key is fanout.lease_key.k, 32 bytes (244 random bits) made at install,
-- readable by pgq's owner only: distinct pages keep distinct ids (fencing
-- is unchanged), and without the key an id says nothing about its slot,
-- page, epoch, topic or any other id. The rounds are written out (one
-- expression each, no loop): a page read costs one encode, an ack one
-- decode. Pure arithmetic: which ids exist is fanout._lease_raw's.
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
BEGIN
    IF p_id IS NULL OR p_id < 1 THEN
        RETURN NULL;
    END IF;
    SELECT k.k INTO STRICT v_key FROM fanout.lease_key k;
    LOOP  -- twice only when the first result is 0
        v_a := v >> 32;
        v_b := v & c_b;
        -- Round r: ('x' || the hex of sha256's first 4 bytes)::bit(32)::bigint.
        IF p_encode THEN
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x01'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x02'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x03'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x04'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x05'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x06'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
        ELSE
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x06'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x05'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x04'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x03'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
            v_b := v_b # ('x' || encode(substr(sha256(v_key || '\x02'::bytea || int8send(v_a)), 1, 4), 'hex'))::bit(32)::bigint;
            v_a := v_a # (('x' || encode(substr(sha256(v_key || '\x01'::bytea || int8send(v_b)), 1, 4), 'hex'))::bit(32)::bigint & c_a);
        END IF;
        v := (v_a << 32) | v_b;
        EXIT WHEN v > 0;
    END LOOP;
    RETURN v;
END
$fn$;
