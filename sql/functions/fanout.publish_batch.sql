-- fanout.publish_batch(topic, payloads, headers, message_groups, notify,
-- dedupe_keys, deliver_at, delay, priority, sequences): appends many
-- messages in one statement
-- (one NOTIFY). headers, message_groups and dedupe_keys, when given, must
-- have one element per payload. notify, deliver_at and delay as in
-- fanout.publish (one delivery time for the whole batch); a dedupe key that
-- repeats within the batch returns the same id each time. priority applies
-- to every message of the batch; sequences (one per payload) as sequence in
-- fanout.publish.
-- Returns the message ids in input order.
-- Raises: as fanout.publish, naming the offending element; PGQ03 when the
-- arrays' lengths differ. Nothing is written when any element is bad.
-- Tables: fanout.topic, fanout.consumer_group, fanout_data.m<topic_id>_dedupe,
-- fanout.seq_published, fanout_data.m<topic_id> (through
-- fanout_data.m<topic_id>_insert_batch, fanout_data.m<topic_id>_insert_keyed
-- or fanout._publish_sequenced).
CREATE OR REPLACE FUNCTION fanout.publish_batch(
    topic          text,
    payloads       jsonb[],
    headers        jsonb[] DEFAULT NULL,
    message_groups text[] DEFAULT NULL,
    notify         boolean DEFAULT NULL,
    dedupe_keys    text[] DEFAULT NULL,
    deliver_at     timestamptz DEFAULT NULL,
    delay          interval DEFAULT NULL,
    priority       int DEFAULT NULL,
    sequences      bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t  fanout.topic;
    v_n  int;
    v_at timestamptz;
    r    record;
BEGIN
    v_t := fanout._enter_topic($1, 'publish');
    IF $2 IS NULL THEN
        RAISE EXCEPTION 'payloads must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    v_n := coalesce(cardinality($2), 0);
    IF $3 IS NOT NULL AND cardinality($3) <> v_n THEN
        RAISE EXCEPTION 'headers has % elements but payloads has %', cardinality($3), v_n USING ERRCODE = 'PGQ03';
    END IF;
    IF $4 IS NOT NULL AND cardinality($4) <> v_n THEN
        RAISE EXCEPTION 'message_groups has % elements but payloads has %', cardinality($4), v_n
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $6 IS NOT NULL AND cardinality($6) <> v_n THEN
        RAISE EXCEPTION 'dedupe_keys has % elements but payloads has %', cardinality($6), v_n
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $10 IS NOT NULL AND cardinality($10) <> v_n THEN
        RAISE EXCEPTION 'sequences has % elements but payloads has %', cardinality($10), v_n
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $10 IS NOT NULL AND array_position($10, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'sequences must not contain NULL (element %)', array_position($10, NULL)
            USING ERRCODE = 'PGQ03';
    END IF;
    v_at := fanout._delivery_time($7, $8);
    IF $9 IS NOT NULL OR $10 IS NOT NULL OR v_t.sequence_ordering THEN
        IF v_n = 0 THEN
            -- No element to check: the options of the call still are (an
            -- empty batch is refused exactly where a non-empty one would be).
            PERFORM fanout._check_order_options(
                v_t, $9, CASE WHEN $10 IS NOT NULL OR v_t.sequence_ordering THEN 1 END, '', v_at, NULL);
        END IF;
        FOR r IN
            SELECT $4[i] AS g, $10[i] AS s, i AS ord FROM generate_series(1, v_n) AS i
        LOOP
            PERFORM fanout._check_order_options(v_t, $9, r.s, r.g, v_at, r.ord::int);
        END LOOP;
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- Only the elements that can fail are checked one by one. A message
    -- group that starts with a visible ASCII character, has 1 to 512
    -- characters and no control character passes fanout._check_name's
    -- rules, and is not checked again (a keyed batch of 1,000 spent 120 ms
    -- in those checks, 4 times its insert).
    FOR r IN
        SELECT u.p, u.h, u.g, u.ord
        FROM unnest($2, $3, $4) WITH ORDINALITY AS u(p, h, g, ord)
        WHERE u.ord = 1 OR u.p IS NULL
           OR octet_length(u.p::text) + coalesce(octet_length(u.h::text), 0) + coalesce(octet_length(u.g), 0)
              > v_t.max_payload_bytes
           OR (u.h IS NOT NULL AND jsonb_typeof(u.h) <> 'object')
           OR (u.g IS NOT NULL AND NOT (u.g ~ '^[!-~]' AND char_length(u.g) <= 512 AND u.g !~ '[[:cntrl:]]'))
    LOOP
        PERFORM fanout._check_message(v_t, r.p, r.h, r.g, r.ord::int);
    END LOOP;
    PERFORM pg_current_xact_id();
    PERFORM fanout._notify_override(v_t, $5, true);
    IF $10 IS NULL AND ($6 IS NOT NULL OR $7 IS NOT NULL OR $8 IS NOT NULL OR $9 IS NOT NULL) THEN
        -- Set-based: keys checked, claimed and the messages inserted by the
        -- topic's generated function (static SQL, plans cached per session).
        RETURN QUERY EXECUTE format('SELECT unnest(fanout_data.%I($1, $2, $3, $4, $5, $6, $7))',
                                    v_t.data_table || '_insert_keyed')
            USING $2, $3, $4, $6, v_at, nullif($9, 0)::smallint, v_t.dedupe_window;
        -- After the keys' claims, as on every publish path: the keys first,
        -- then the topic row.
        IF $9 > 0 AND NOT v_t.prioritized THEN
            UPDATE fanout.topic t SET prioritized = true WHERE t.topic_id = v_t.topic_id AND NOT t.prioritized;
        END IF;
    ELSIF $10 IS NOT NULL THEN
        -- Sequences (a sequence-ordered topic: no priority, no delivery
        -- time, checked above): keys, then sequences, each in a fixed order.
        RETURN QUERY SELECT fanout._publish_sequenced(v_t, $2, $3, $4, $6, $10);
    ELSE
        RETURN QUERY EXECUTE format('SELECT fanout_data.%I($1, $2, $3)', v_t.data_table || '_insert_batch')
            USING $2, $3, $4;
    END IF;
    PERFORM fanout._notify_override(v_t, $5, false);
END
$fn$;
