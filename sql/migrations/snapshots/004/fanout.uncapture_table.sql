-- fanout.uncapture_table(table_name): stops capturing a table's changes
-- (fanout.capture_table): drops its capture triggers and forgets the
-- capture and its generated trigger function. Messages already published
-- stay. Only the table's owner may.
-- Returns whether the table was captured.
-- Raises: PGQ03 (NULL), PGQ21 (not the table's owner).
-- Tables: fanout.capture, fanout.event_log, pg_trigger (DROP TRIGGER), a
-- function in fanout_data (DROP FUNCTION).
CREATE OR REPLACE FUNCTION fanout.uncapture_table(table_name regclass)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_id    bigint;
    v_topic text;
BEGIN
    PERFORM fanout._capture_check_owner($1, 'uncapture');
    SELECT split_part(encode(tg.tgargs, 'escape'), '\000', 1)::bigint INTO v_id
    FROM pg_trigger tg WHERE tg.tgrelid = $1 AND tg.tgname = 'fanout_capture_ins';
    IF NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = $1 AND tg.tgname LIKE 'fanout\_capture\_%') THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TRIGGER IF EXISTS fanout_capture_ins ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_upd ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_del ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_trunc ON %1$s', $1);
    DELETE FROM fanout.capture c WHERE c.capture_id = v_id RETURNING c.topic INTO v_topic;
    -- Its generated function, unless another table's triggers still run it
    -- (a capture's triggers copied by hand, e.g. CREATE TABLE ... LIKE).
    IF v_id IS NOT NULL AND to_regprocedure(format('fanout_data.%I()', 'capture_' || v_id)) IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_trigger tg
                       WHERE tg.tgfoid = to_regprocedure(format('fanout_data.%I()', 'capture_' || v_id))) THEN
        EXECUTE format('DROP FUNCTION fanout_data.%I()', 'capture_' || v_id);
    END IF;
    IF v_topic IS NOT NULL THEN
        INSERT INTO fanout.event_log (topic, kind, detail)
        VALUES (v_topic, 'uncapture', jsonb_build_object('table', $1::text, 'capture_id', v_id));
    END IF;
    RETURN true;
END
$fn$;
