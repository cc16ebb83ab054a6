-- fanout._completion_switch_reference(p_t): switches offset topic p_t (its
-- row locked FOR UPDATE by the caller, fanout._completion_switch, which has
-- checked it may switch) to reference completion, live, in one short lock:
--   1. the message table with all its partitions in ACCESS EXCLUSIVE mode,
--      then every group row of the topic, each wait bounded by
--      lock_timeout 500 ms (below PostgreSQL's default deadlock_timeout, so
--      in a lock cycle with a reader this call gives up first); an attempt
--      that cannot get them all lets go of what it took, pauses 100 ms and
--      tries again, 5 attempts, then PGQ28. Publishers and readers of the
--      topic wait at most one attempt's 500 ms, plus the rest of this
--      transaction once the locks are held (catalog changes only). Holding
--      the table means no transaction is writing to it: every row inserted
--      before has an id below the switch id, every later insert runs the
--      new trigger;
--   2. the switch id: the next id of the sequence. Messages below it carry
--      no bits and are accounted the offset way (read by position, released
--      when every pinning group has passed them: fanout._partition_droppable),
--      messages from it on carry the bits of the groups they require;
--   3. the column required_groups (NOT NULL DEFAULT 0: a constant default,
--      so no row is rewritten), the stamping trigger, the epoch sequence, the
--      topic_state row (a new epoch: an insert whose snapshot predates the
--      switch sees no row or an older epoch and lists itself in
--      fanout.stamp_pending, fanout._required_groups_trigger), the
--      completion table with a partition per message partition and its
--      function, and the (id) index on the partitions that start at or after
--      the switch id (empty ones, created ahead); the partition the switch
--      falls in keeps none (building it would stop publishers), and later
--      partitions get theirs when created (fanout._create_partition);
--   4. a bit for every group (at most 64, checked by the caller: PGQ17),
--      lowest first in group order (joined_id and join_snap stay those of
--      its subscription; a backfill never starts below the switch id,
--      fanout._start_bitmap_job); the mask is kept by
--      fanout._group_mask_trigger (active and paused groups);
--   5. the page functions with the per-region filter (below the switch id
--      every row, from it on the group's bit: fanout._create_page_functions).
-- A topic that was in reference mode before keeps its column, trigger,
-- sequence and completion table (rows below the switch id may carry stale
-- bits; nothing reads them as bits any more). Returns the switch id.
-- Runs in READ COMMITTED only (PGQ09 otherwise, before it locks the table;
-- alter_topic already holds the topic's row): the group
-- rows and partitions it gives bits and completion partitions must be those
-- committed once it holds the table; a REPEATABLE READ snapshot from before
-- a new group's subscribe (or a partition's creation) that committed while
-- this waited would leave that group without a bit (it would read nothing
-- from the switch id on) or that partition without its completion one.
-- Tables: fanout.topic, fanout.consumer_group, fanout.partition,
-- fanout.topic_state, fanout.stamp_pending, fanout_data.m<id> (DDL: column,
-- trigger, indexes), fanout_data.m<id>_done*, fanout_data.m<id>_epoch.
CREATE OR REPLACE FUNCTION fanout._completion_switch_reference(p_t fanout.topic)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_timeout  text := current_setting('lock_timeout');
    v_try      int := 0;
    v_next     bigint;
    v_seq      text := p_t.data_table || '_epoch';
    v_epoch    bigint;
    v_p        fanout.partition;
    v_bit      int := 0;
    v_id       bigint;
    c_tries    constant int := 5;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'switching a topic to completion ''reference'' must run in READ COMMITTED, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'PGQ09', HINT = 'call alter_topic(completion => ''reference'') in its own READ COMMITTED transaction';
    END IF;
    LOOP
        v_try := v_try + 1;
        BEGIN
            PERFORM set_config('lock_timeout', '500ms', true);
            -- The parent and every partition (the column is added to each),
            -- then the group rows: the order of a read (fanout._enter_topic
            -- locks the table, then the read its group's row).
            EXECUTE format('LOCK TABLE fanout_data.%I IN ACCESS EXCLUSIVE MODE', p_t.data_table);
            PERFORM 1 FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id
            ORDER BY g.group_id FOR NO KEY UPDATE;
            PERFORM set_config('lock_timeout', v_timeout, true);
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            -- The subtransaction let go of the locks it took and restored lock_timeout.
            IF v_try >= c_tries THEN
                RAISE EXCEPTION 'topic % is busy: its table could not be locked for the completion switch (% attempts of 500 ms)',
                    quote_literal(p_t.topic), c_tries
                    USING ERRCODE = 'PGQ28',
                          HINT = 'retry; a transaction left open on the topic (a publisher, a read in a long transaction) holds it';
            END IF;
            PERFORM pg_sleep(0.1);  -- let the publishers queued behind the attempt through
        END;
    END LOOP;

    v_next := fanout._next_id(p_t);
    EXECUTE format('ALTER TABLE fanout_data.%I ADD COLUMN IF NOT EXISTS required_groups bigint NOT NULL DEFAULT 0',
                   p_t.data_table);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger tg
                   WHERE tg.tgrelid = format('fanout_data.%I', p_t.data_table)::regclass
                     AND tg.tgname = 'required_groups') THEN
        EXECUTE format('CREATE TRIGGER required_groups BEFORE INSERT ON fanout_data.%I '
                       'FOR EACH ROW EXECUTE FUNCTION fanout._required_groups_trigger(%L)',
                       p_t.data_table, p_t.topic_id);
    END IF;
    IF to_regclass(format('fanout_data.%I', v_seq)) IS NULL THEN
        EXECUTE format('CREATE SEQUENCE fanout_data.%I AS bigint MINVALUE 1 START 1', v_seq);
        EXECUTE format('ALTER SEQUENCE fanout_data.%I OWNED BY fanout_data.%I.id', v_seq, p_t.data_table);
    END IF;
    -- A new epoch: a snapshot that sees the row from an earlier reference
    -- period sees an older epoch than the sequence, one that sees no row
    -- lists itself for that (fanout._required_groups_trigger).
    v_epoch := nextval(format('fanout_data.%I', v_seq)::regclass);
    INSERT INTO fanout.topic_state AS s (topic_id, required_mask, epoch, epoch_seq)
    VALUES (p_t.topic_id, 0, v_epoch, format('fanout_data.%I', v_seq)::regclass)
    ON CONFLICT (topic_id) DO UPDATE SET required_mask = 0, epoch = excluded.epoch, refreshed_at = clock_timestamp();
    PERFORM fanout._create_done_table(p_t.data_table);
    FOR v_p IN SELECT * FROM fanout.partition p WHERE p.topic_id = p_t.topic_id ORDER BY p.part_no LOOP
        IF to_regclass(format('fanout_data.%I', p_t.data_table || '_done_p' || v_p.part_no)) IS NULL THEN
            EXECUTE format('CREATE TABLE fanout_data.%I PARTITION OF fanout_data.%I FOR VALUES FROM (%s) TO (%s)',
                           p_t.data_table || '_done_p' || v_p.part_no, p_t.data_table || '_done',
                           v_p.lo_id, v_p.hi_id);
        END IF;
        IF v_p.lo_id >= v_next AND to_regclass(format('fanout_data.%I', p_t.data_table || '_id')) IS NULL THEN
            -- Empty (no id of it handed out): built at once.
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON fanout_data.%I (id)', v_p.relname || '_id', v_p.relname);
        END IF;
    END LOOP;
    UPDATE fanout.topic t
    SET completion = 'reference', completion_switch_id = v_next, completion_switched_at = clock_timestamp(),
        completion_switch_vxids = NULL, completion_switch_done_at = clock_timestamp()
    WHERE t.topic_id = p_t.topic_id;
    -- Bits (fanout._group_mask_trigger keeps the mask and its epoch).
    FOR v_id IN SELECT g.group_id FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id ORDER BY g.group_id LOOP
        UPDATE fanout.consumer_group g
        SET bit_no = v_bit
        WHERE g.group_id = v_id;
        v_bit := v_bit + 1;
    END LOOP;
    -- The mask's fence (fanout._stamp_fence) listed the writers of the
    -- table: only this transaction, which inserts no message.
    DELETE FROM fanout.stamp_pending s WHERE s.topic_id = p_t.topic_id AND s.txid = pg_current_xact_id();
    PERFORM fanout._create_done_function(p_t.topic_id);
    PERFORM fanout._create_page_functions(p_t.topic_id);  -- the per-region bit filter
    RETURN v_next;
END
$fn$;
