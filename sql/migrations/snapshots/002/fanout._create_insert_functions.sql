-- fanout._create_insert_functions(p_topic_id): (re)creates the topic's
-- insert functions in fanout_data, named from its message table:
-- m<id>_insert(payload, headers, message_group) RETURNS bigint and
-- m<id>_insert_batch(payloads[], headers[], message_groups[]) RETURNS SETOF
-- bigint (ids ascending, i.e. in input order), and
-- m<id>_insert_one(id, payload, headers, message_group, deliver_at, priority,
-- seq) for publishes with a dedupe key, a delivery time, a priority or a
-- sequence (id NULL = the next one), and
-- m<id>_insert_keyed(payloads[], headers[], message_groups[], dedupe_keys[],
-- deliver_at, priority, dedupe_window) RETURNS bigint[] for
-- fanout.publish_batch with dedupe keys, a delivery time or a priority: it
-- checks the keys (PGQ03: empty or over 512 characters), takes the ids (in
-- input order) and, when every key is new, claims them in m<id>_dedupe and
-- inserts the messages in one statement, in a subtransaction (at most 8 per
-- transaction); when a key exists or repeats in the batch, or the 8 are used
-- up, it claims each distinct key with INSERT ... ON CONFLICT (in key order),
-- inserts the messages whose own id was claimed or that have no key, and
-- gives each other element the id its key has (published before, by a
-- concurrent transaction the claim waited for, or by an earlier element of
-- the batch). Returns the ids in input order. Without keys it is a plain
-- insert with a delivery time and priority. And
-- m<id>_claim(key, id, window) RETURNS bigint for fanout.publish with a
-- dedupe key and a sequence: claims the key for id in the topic's table of
-- keys (m<id>_dedupe; a row past the window is taken over) and returns the
-- id the key has then: id when claimed, else the one it was published with
-- (after waiting for a concurrent claim's transaction). And
-- m<id>_insert_claimed(key, window, payload, headers, message_group,
-- deliver_at, priority) RETURNS bigint for fanout.publish with a dedupe key
-- and no sequence: the next id, its claim (m<id>_claim), and the message
-- when the key was claimed; returns the id the key has.
-- Their INSERTs are static SQL,
-- so each session plans them once: planning an INSERT into a partitioned
-- table on every publish (dynamic SQL) cost more than the insert itself.
-- On a partitioned topic they also set each message's kpart (the topic's
-- partition count is compiled in: fanout.alter_topic regenerates them).
-- Nobody but the owner may call them. Tables: fanout.topic; creates functions.
CREATE OR REPLACE FUNCTION fanout._create_insert_functions(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_seq   text;
    v_parts int;
    v_kcol  text := '';
BEGIN
    SELECT t.data_table, t.seq_name, t.partitions INTO STRICT v_table, v_seq, v_parts
    FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF v_parts IS NOT NULL THEN
        -- Partitioned topic: each message's key partition (fanout._kpart_of;
        -- no message_group: at random), with the count as a constant.
        v_kcol := ', kpart';
    END IF;
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payload jsonb, p_headers jsonb, p_message_group text)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I (headers, message_group, payload%3$s)
            VALUES (p_headers, p_message_group, p_payload%4$s)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert', v_table, v_kcol, fanout._kpart_expr(v_parts, 'p_message_group'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payloads jsonb[], p_headers jsonb[], p_message_groups text[])
        RETURNS SETOF bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        BEGIN
            RETURN QUERY
            WITH ins AS (
                INSERT INTO fanout_data.%2$I (headers, message_group, payload%3$s)
                SELECT coalesce(u.h, '{}'::jsonb), u.g, u.p%4$s
                FROM unnest(p_payloads, p_headers, p_message_groups) WITH ORDINALITY AS u(p, h, g, ord)
                ORDER BY u.ord
                RETURNING id)
            SELECT ins.id FROM ins ORDER BY ins.id;
        END
        $body$$ddl$, v_table || '_insert_batch', v_table, v_kcol, fanout._kpart_expr(v_parts, 'u.g'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_id bigint, p_payload jsonb, p_headers jsonb,
                                                   p_message_group text, p_deliver_at timestamptz,
                                                   p_priority smallint, p_seq bigint)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority, seq%4$s)
            VALUES (coalesce(p_id, nextval(%3$L::regclass)), p_headers, p_message_group, p_payload, p_deliver_at,
                    p_priority, p_seq%5$s)
            RETURNING id INTO v_id;
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert_one', v_table, 'fanout_data.' || quote_ident(v_seq), v_kcol,
        fanout._kpart_expr(v_parts, 'p_message_group'));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_payloads jsonb[], p_headers jsonb[], p_message_groups text[],
                                                   p_keys text[], p_deliver_at timestamptz, p_priority smallint,
                                                   p_window interval)
        RETURNS bigint[]
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_ids     bigint[];
            v_claimed bigint[];
            v_keyed   bigint;
            v_bad     bigint;
            v_used    int;
            v_snap    pg_snapshot;
        BEGIN
            IF p_keys IS NULL THEN
                WITH ins AS (
                    INSERT INTO fanout_data.%2$I (headers, message_group, payload, deliver_at, priority%4$s)
                    SELECT coalesce(u.h, '{}'::jsonb), u.g, u.p, p_deliver_at, p_priority%5$s
                    FROM unnest(p_payloads, p_headers, p_message_groups) WITH ORDINALITY AS u(p, h, g, ord)
                    ORDER BY u.ord
                    RETURNING id)
                SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;
                RETURN v_ids;
            END IF;
            -- The ids, in input order, and the first bad key, in one pass.
            SELECT array_agg(nextval(%3$L::regclass) ORDER BY u.ord), count(u.k),
                   min(u.ord) FILTER (WHERE u.k = '' OR octet_length(u.k) > 512 AND length(u.k) > 512)
            INTO v_ids, v_keyed, v_bad
            FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord);
            IF v_bad IS NOT NULL THEN
                RAISE EXCEPTION 'dedupe_key must have 1 to 512 characters, got %%',
                    (SELECT length(u.k) FROM unnest(p_keys) WITH ORDINALITY AS u(k, ord) WHERE u.ord = v_bad)
                    USING ERRCODE = 'PGQ03';
            END IF;
            -- Taken before any wait for a key's holder: a key held by a
            -- transaction open now is never taken over (see the claim's
            -- ON CONFLICT below).
            v_snap := pg_current_snapshot();
            -- The claim and the messages, first as one statement with a
            -- plain INSERT of the keys in a subtransaction: about half the
            -- cost of INSERT ... ON CONFLICT (no speculative insertion). A
            -- key that exists (published before, or by a concurrent
            -- transaction that committed: the INSERT waited for it) or that
            -- repeats in the batch aborts it, and the claim is made again
            -- with ON CONFLICT. At most 8 such subtransactions per
            -- transaction (fanout.dedupe_subxacts counts them), so that a
            -- transaction publishing many batches never overflows its
            -- backend's cache of 64 subtransaction ids. Keys go in in key
            -- order, so that two batches sharing keys wait for each other
            -- instead of deadlocking.
            v_used := CASE WHEN current_setting('fanout.dedupe_subxacts', true) ~ '^[0-9]{1,4}$'
                           THEN current_setting('fanout.dedupe_subxacts', true)::int ELSE 0 END;
            IF v_used < 8 THEN
                PERFORM set_config('fanout.dedupe_subxacts', (v_used + 1)::text, true);
                BEGIN
                    WITH claim AS (
                        INSERT INTO fanout_data.%6$I (dedupe_key, message_id, created_at)
                        SELECT u.k, u.id, clock_timestamp()
                        FROM unnest(p_keys, v_ids) AS u(k, id)
                        WHERE u.k IS NOT NULL
                        ORDER BY u.k)
                    INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority%4$s)
                    SELECT u.id, coalesce(u.h, '{}'::jsonb), u.g, u.p, p_deliver_at, p_priority%5$s
                    FROM unnest(v_ids, p_payloads, p_headers, p_message_groups) AS u(id, p, h, g);
                    RETURN v_ids;
                EXCEPTION WHEN unique_violation THEN
                    NULL;
                END;
            END IF;
            -- Each distinct key once, its first element's id; a row past
            -- the window is taken over.
            WITH claimed AS (
                INSERT INTO fanout_data.%6$I AS d (dedupe_key, message_id, created_at)
                SELECT f.k, f.id, clock_timestamp()
                FROM (SELECT DISTINCT ON (u.k) u.k, u.id
                      FROM unnest(p_keys, v_ids) WITH ORDINALITY AS u(k, id, ord)
                      WHERE u.k IS NOT NULL ORDER BY u.k, u.ord) f
                ORDER BY f.k
                ON CONFLICT (dedupe_key) DO UPDATE
                SET message_id = excluded.message_id, created_at = excluded.created_at, claim_txid = excluded.claim_txid
                WHERE d.created_at < clock_timestamp() - p_window AND fanout._claim_committed_before(d.claim_txid, v_snap)
                RETURNING d.message_id)
            SELECT array_agg(c.message_id) INTO v_claimed FROM claimed c;
            IF coalesce(cardinality(v_claimed), 0) < v_keyed THEN
                -- Not every key claimed (published before, or repeated in
                -- the batch): only the elements whose own id was claimed, or
                -- that have no key, are inserted.
                SELECT array_agg(CASE WHEN u.k IS NULL OR u.id IN (SELECT unnest(v_claimed)) THEN u.id END
                                 ORDER BY u.ord)
                INTO v_ids FROM unnest(v_ids, p_keys) WITH ORDINALITY AS u(id, k, ord);
            END IF;
            INSERT INTO fanout_data.%2$I (id, headers, message_group, payload, deliver_at, priority%4$s)
            SELECT u.id, coalesce(u.h, '{}'::jsonb), u.g, u.p, p_deliver_at, p_priority%5$s
            FROM unnest(v_ids, p_payloads, p_headers, p_message_groups) AS u(id, p, h, g)
            WHERE u.id IS NOT NULL;
            IF array_position(v_ids, NULL) IS NOT NULL THEN
                -- The other elements get the id their key has, in a new
                -- statement, which sees a concurrent claim the INSERT
                -- waited for.
                SELECT array_agg(coalesce(x.id, d.message_id) ORDER BY x.ord) INTO v_ids
                FROM unnest(v_ids, p_keys) WITH ORDINALITY AS x(id, k, ord)
                LEFT JOIN fanout_data.%6$I d ON x.id IS NULL AND d.dedupe_key = x.k;
            END IF;
            RETURN v_ids;
        END
        $body$$ddl$, v_table || '_insert_keyed', v_table, 'fanout_data.' || quote_ident(v_seq), v_kcol,
        fanout._kpart_expr(v_parts, 'u.g'), v_table || '_dedupe');
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_key text, p_id bigint, p_window interval)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_taken bigint;
        BEGIN
            INSERT INTO fanout_data.%2$I AS d (dedupe_key, message_id, created_at)
            VALUES (p_key, p_id, clock_timestamp())
            ON CONFLICT (dedupe_key) DO UPDATE
            SET message_id = excluded.message_id, created_at = excluded.created_at, claim_txid = excluded.claim_txid
            WHERE d.created_at < clock_timestamp() - p_window
              AND fanout._claim_committed_before(d.claim_txid, pg_current_snapshot())
            RETURNING d.message_id INTO v_taken;
            IF v_taken IS NULL THEN
                SELECT d.message_id INTO STRICT v_taken FROM fanout_data.%2$I d WHERE d.dedupe_key = p_key;
            END IF;
            RETURN v_taken;
        END
        $body$$ddl$, v_table || '_claim', v_table || '_dedupe');
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_key text, p_window interval, p_payload jsonb, p_headers jsonb,
                                                   p_message_group text, p_deliver_at timestamptz, p_priority smallint)
        RETURNS bigint
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        AS $body$
        DECLARE
            v_id    bigint := nextval(%3$L::regclass);
            v_taken bigint := fanout_data.%2$I(p_key, v_id, p_window);
        BEGIN
            IF v_taken <> v_id THEN
                RETURN v_taken;  -- published before, within the window
            END IF;
            INSERT INTO fanout_data.%4$I (id, headers, message_group, payload, deliver_at, priority%5$s)
            VALUES (v_id, p_headers, p_message_group, p_payload, p_deliver_at, p_priority%6$s);
            RETURN v_id;
        END
        $body$$ddl$, v_table || '_insert_claimed', v_table || '_claim', 'fanout_data.' || quote_ident(v_seq),
        v_table, v_kcol, fanout._kpart_expr(v_parts, 'p_message_group'));
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb, jsonb, text) FROM PUBLIC', v_table || '_insert');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb[], jsonb[], text[], text[], timestamptz, smallint, interval) FROM PUBLIC',
                   v_table || '_insert_keyed');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(bigint, jsonb, jsonb, text, timestamptz, smallint, bigint) FROM PUBLIC',
                   v_table || '_insert_one');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(jsonb[], jsonb[], text[]) FROM PUBLIC',
                   v_table || '_insert_batch');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(text, bigint, interval) FROM PUBLIC', v_table || '_claim');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(text, interval, jsonb, jsonb, text, timestamptz, smallint) FROM PUBLIC',
                   v_table || '_insert_claimed');
END
$fn$;
