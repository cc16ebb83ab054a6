-- fanout._kpart_read(p_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
-- p_partition, p_now): release 0.1.0's entry of a partitioned read, kept
-- with its signature for a fanout.read of 0.1.0 in flight while the upgrade
-- commits (its next statement calls it by name): the page of
-- fanout._kpart_claim, and its rows as fanout.read returns them. Nothing of
-- this release calls it; the next release drops it.
-- Tables: those of fanout._kpart_claim.
CREATE OR REPLACE FUNCTION fanout._kpart_read(
    p_t fanout.topic, p_group text, p_consumer text, p_max int, p_lease interval, p_max_bytes bigint,
    p_partition int, p_now timestamptz)
RETURNS TABLE(lease_id bigint, message_id bigint, payload jsonb, headers jsonb,
              message_group text, published_at timestamptz, attempt int)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_p record;
BEGIN
    SELECT * INTO v_p FROM fanout._kpart_claim(p_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
                                               p_partition, p_now);
    IF v_p.o_lease_id IS NOT NULL THEN
        RETURN QUERY EXECUTE format('SELECT * FROM fanout_data.%I($1, $2, $3, $4)', p_t.data_table || '_rows')
            USING v_p.o_lease_id, v_p.o_ids, v_p.o_txids, v_p.o_atts;
    END IF;
END
$fn$;
