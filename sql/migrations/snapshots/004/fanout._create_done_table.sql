-- fanout._create_done_table(p_data_table): the completion table of a
-- reference-mode topic whose message table is fanout_data.<p_data_table>,
-- unless it exists: one row per ack (or dead-letter) call and storage
-- segment, the group's bit and the sorted ids it settled, partitioned like
-- the messages (by lo) and emptied with them (fanout._complete_bits,
-- fanout._done_bits). Completion lives beside the messages, never in them,
-- so message rows stay append-only. Used by create_topic and by the switch
-- to reference completion (fanout._completion_switch_reference).
-- Creates fanout_data.<p_data_table>_done and its range index.
CREATE OR REPLACE FUNCTION fanout._create_done_table(p_data_table text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF to_regclass(format('fanout_data.%I', p_data_table || '_done')) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format($ddl$
        CREATE TABLE fanout_data.%I (
            bit  smallint NOT NULL,
            lo   bigint   NOT NULL,
            hi   bigint   NOT NULL,
            ids  bigint[] NOT NULL
        ) PARTITION BY RANGE (lo)$ddl$, p_data_table || '_done');
    EXECUTE format('CREATE INDEX %I ON fanout_data.%I USING gist (int8range(lo, hi, ''[]''))',
                   p_data_table || '_done_range', p_data_table || '_done');
END;
$fn$;
