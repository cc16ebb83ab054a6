-- fanout._capture_install(p_capture_id, p_table): (re)generates the
-- capture's trigger function (fanout._capture_generate) and (re)creates the
-- table's four statement-level AFTER triggers fanout_capture_ins/_upd/_del
-- (with their transition tables fanout_new/fanout_old) and
-- fanout_capture_trunc, each naming the capture by id in its argument
-- (fanout.captures and fanout._cleanup_bookkeeping find a capture's table by
-- it). Used by fanout.capture_table, and by the upgrade for captures made
-- before the triggers were generated.
-- Tables: fanout.capture; pg_trigger (DROP/CREATE TRIGGER), creates a
-- function in fanout_data.
CREATE OR REPLACE FUNCTION fanout._capture_install(p_capture_id bigint, p_table regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_f text;
BEGIN
    PERFORM fanout._capture_generate(p_capture_id);
    v_f := format('fanout_data.%I', 'capture_' || p_capture_id);
    EXECUTE format('DROP TRIGGER IF EXISTS fanout_capture_ins ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_upd ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_del ON %1$s;
                    DROP TRIGGER IF EXISTS fanout_capture_trunc ON %1$s', p_table);
    EXECUTE format('CREATE TRIGGER fanout_capture_ins AFTER INSERT ON %s REFERENCING NEW TABLE AS fanout_new
                    FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', p_table, v_f, p_capture_id);
    EXECUTE format('CREATE TRIGGER fanout_capture_upd AFTER UPDATE ON %s
                    REFERENCING OLD TABLE AS fanout_old NEW TABLE AS fanout_new
                    FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', p_table, v_f, p_capture_id);
    EXECUTE format('CREATE TRIGGER fanout_capture_del AFTER DELETE ON %s REFERENCING OLD TABLE AS fanout_old
                    FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', p_table, v_f, p_capture_id);
    EXECUTE format('CREATE TRIGGER fanout_capture_trunc AFTER TRUNCATE ON %s
                    FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', p_table, v_f, p_capture_id);
END
$fn$;
