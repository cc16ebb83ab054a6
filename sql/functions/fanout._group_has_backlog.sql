-- fanout._group_has_backlog(p_group_id): true when the group still has
-- something to consume or settle: an open lease, a pending retry, or a
-- committed message after its cursor. Reads fanout.consumer_group,
-- fanout.lease, fanout.retry and the topic's message table.
CREATE OR REPLACE FUNCTION fanout._group_has_backlog(p_group_id bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g     fanout.consumer_group;
    v_table text;
    v_found boolean;
BEGIN
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    IF EXISTS (SELECT 1 FROM fanout.lease l WHERE l.group_id = p_group_id AND l.open_count > 0)
       OR EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = p_group_id) THEN
        RETURN true;
    END IF;
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM fanout_data.%1$I m
                        WHERE m.txid = ANY ($1) AND (m.txid, m.id) > ($2, $3))
             OR EXISTS (SELECT 1 FROM fanout_data.%1$I m
                        WHERE m.txid >= greatest($4, $2) AND (m.txid, m.id) > ($2, $3))', v_table)
        INTO v_found
        USING ARRAY(SELECT pg_snapshot_xip(v_g.win_lo)), v_g.cur_txid, v_g.cur_id, pg_snapshot_xmax(v_g.win_lo);
    RETURN v_found;
END
$fn$;
