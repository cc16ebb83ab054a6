-- fanout._set_notify(p_topic_id, p_on): creates or drops the statement-level
-- AFTER INSERT trigger that sends one NOTIFY per publishing statement on the
-- topic's channel (fanout_<topic_id>). Tables: fanout.topic, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._set_notify(p_topic_id bigint, p_on boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
BEGIN
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF p_on THEN
        EXECUTE format('CREATE OR REPLACE TRIGGER notify AFTER INSERT ON fanout_data.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION fanout._notify_trigger(%L)',
                       v_table, fanout.channel_name(p_topic_id));
    ELSE
        EXECUTE format('DROP TRIGGER IF EXISTS notify ON fanout_data.%I', v_table);
    END IF;
END
$fn$;
