-- fanout._set_notify(p_topic_id, p_on): creates or drops the statement-level
-- AFTER INSERT trigger that sends one NOTIFY per publishing statement on the
-- topic's channel (fanout_<topic_id>). The trigger change needs a SHARE ROW
-- EXCLUSIVE lock on the topic's table, which conflicts with publishing: to
-- never queue publishers behind it (a waiting lock request makes every later
-- publish wait too), it is tried with NOWAIT, every 100 ms for 5 seconds.
-- Raises: 55P03 (lock_not_available) when publishing transactions kept the
-- table busy all that time: retry when they are shorter.
-- Tables: fanout.topic, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._set_notify(p_topic_id bigint, p_on boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_try   int := 0;
BEGIN
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    LOOP
        BEGIN
            EXECUTE format('LOCK TABLE fanout_data.%I IN SHARE ROW EXCLUSIVE MODE NOWAIT', v_table);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            v_try := v_try + 1;
            IF v_try >= 50 THEN
                RAISE EXCEPTION 'topic % is busy with publishing transactions; notify was not changed',
                    p_topic_id USING ERRCODE = '55P03', HINT = 'retry; publishing transactions held its table for 5 seconds';
            END IF;
            PERFORM pg_sleep(0.1);
        END;
    END LOOP;
    IF p_on THEN
        EXECUTE format('CREATE OR REPLACE TRIGGER notify AFTER INSERT ON fanout_data.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION fanout._notify_trigger(%L)',
                       v_table, fanout.channel_name(p_topic_id));
    ELSE
        EXECUTE format('DROP TRIGGER IF EXISTS notify ON fanout_data.%I', v_table);
    END IF;
END
$fn$;
