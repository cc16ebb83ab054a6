-- fanout._capture_generate(p_capture_id): (re)creates the capture's trigger
-- function fanout_data.capture_<id>() (fanout.capture_table's four
-- statement-level AFTER triggers run it) from the capture's row: the table's
-- name, the topic's name, id and message table, the key columns, columns and
-- exclude_columns are compiled in, so each statement runs static SQL whose
-- plans the session keeps, and no nested function call on the way of a
-- statement that passes (each call of a function with SET search_path costs
-- a GUC level and a search path recomputed twice). The generated function,
-- on every statement:
--   1. checks the writer's publish grant by fanout._may's rule, reads the
--      topic's bytes quota (fanout.quota_block) and its row, in one query;
--      refused or blocked, it calls fanout._enter, which raises PGQ21/PGQ25
--      as every publish does. So neither a capture nor a forged trigger
--      lets a writer publish where it may not, and a grant revoked between
--      two statements of one transaction refuses the second;
--   2. locks the topic's message table ACCESS SHARE (a static LOCK TABLE
--      where fanout._enter runs a dynamic one): fanout.drop_topic takes it
--      ACCESS EXCLUSIVE first, so the topic cannot be dropped under the
--      statement or before the writer's transaction ends; a table dropped
--      while this waited (42P01) takes the general path below;
--   3. builds the messages set-based from the transition tables and
--      inserts them into the topic's message table in ONE static INSERT
--      (shape: docs/capture.md; insert and delete straight from one side,
--      update zips old and new rows, which the transition tables hold in
--      step: a key change is a delete and an insert, an update of no
--      captured column publishes nothing). Each message passes a cheap test
--      on its way (its key present, the size as fanout._check_message
--      measures it, exact; the message_group: a number key by its length,
--      other ASCII keys by fanout._check_name's quick form, other keys by
--      fanout._check_name itself; a pubsub block read
--      in step 1); one that fails it goes through fanout._capture_refuse,
--      which raises what publish_batch raises (PGQ03, PGQ05, PGQ04, PGQ07,
--      naming the element), or passes it. No call of the topic's insert
--      functions: the key partition (partitioned topics) is
--      fanout._kpart_of inline over the count read in step 1.
-- When the topic was dropped (PGQ01), re-created under another id, or is
-- sequence-ordered, it builds the arrays and goes through
-- fanout.publish_batch instead, which raises what publish raises.
-- Row images are to_jsonb(row) and keys are read from it, so a column added,
-- dropped or renamed later changes the images from the next statement on,
-- without regenerating; a statement on a row whose image lacks a captured
-- key column (renamed or dropped) fails with PGQ03 until the owner calls
-- fanout.capture_table again, rather than publish a message without a key.
-- Shape 'statement' (fanout.capture_table(..., shape => 'statement')): steps
-- 1 and 2 as above, then ONE message per statement: the transition rows'
-- images as json arrays ('inserted': new rows, 'deleted': old rows; an
-- UPDATE has both, in step), inline up to the capture's claim_check_rows
-- per side and within max_payload_bytes, else a claim-check: the message
-- carries the counts and the rows go to fanout.capture_chunk in chunks of
-- 500 (one INSERT per side, json_agg over the rows grouped by position;
-- json, not jsonb: the writer builds text). message_group: the table's
-- name. Its general path (topic dropped, re-created, sequence-ordered) is
-- fanout.publish and the chunks under the topic it published to.
-- The body's dollar quote is a random tag found nowhere else in it, so no
-- topic or column name can end it early. Nobody but the owner may call it.
-- Tables: fanout.capture, fanout.topic; creates a function in fanout_data.
CREATE OR REPLACE FUNCTION fanout._capture_generate(p_capture_id bigint)
RETURNS regprocedure
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_c     fanout.capture;
    v_t     fanout.topic;
    v_fn    text := 'capture_' || p_capture_id;
    v_img   text;
    v_key   text;
    v_grp   text;
    v_nokey text;
    v_num   text;
    v_kcol  text := '';
    v_kpart text := '';
    v_ins   text;
    v_del   text;
    v_upd   text;
    v_trunc text;
    v_write text;
    v_tail  text := ') r) x';
    v_tag   text;
    v_sql   text;
    v_simg  text;
    v_stmt  text := '';
BEGIN
    SELECT * INTO STRICT v_c FROM fanout.capture c WHERE c.capture_id = p_capture_id;
    v_t := fanout._topic(v_c.topic);
    -- The row image of s.j (to_jsonb of a transition row).
    v_img := CASE
        WHEN v_c.columns IS NOT NULL THEN
            format('(SELECT coalesce(jsonb_object_agg(e.key, e.value), ''{}'') FROM jsonb_each(s.j) e
                     WHERE e.key = ANY (%L::text[]) AND e.key <> ALL (%L::text[]))', v_c.columns, v_c.exclude_columns)
        WHEN cardinality(v_c.exclude_columns) > 0 THEN format('(s.j - %L::text[])', v_c.exclude_columns)
        ELSE 's.j' END;
    v_key := 'jsonb_build_object(' || (SELECT string_agg(format('%L, s.j -> %L', k, k), ', ')
                                       FROM unnest(v_c.key_columns) AS k) || ')';
    v_grp := CASE WHEN cardinality(v_c.key_columns) = 1 THEN format('s.j ->> %L', v_c.key_columns[1])
                  ELSE v_key || '::text' END;
    v_nokey := (SELECT string_agg(format('s.j -> %L IS NULL', k), ' OR ') FROM unnest(v_c.key_columns) AS k);
    -- The message_group test, chosen per key: a one-column key whose value
    -- is a JSON number (an integer or numeric key) has a message_group of
    -- ASCII digits, sign, point and exponent, valid exactly when it has at
    -- most 512 characters: no regular expression. Whether the value is a
    -- number is read per row (the column's type may be altered later).
    -- Other keys (text, composite) take the regular expressions, and only
    -- when all ASCII: fanout._check_name limits the length in Unicode NFC,
    -- which can be longer than the text as written (U+0958 is two
    -- characters in NFC), so a non-ASCII key is checked exactly
    -- (fanout._capture_refuse).
    v_num := CASE WHEN cardinality(v_c.key_columns) = 1
                  THEN format('jsonb_typeof(s.j -> %L) = ''number''', v_c.key_columns[1]) ELSE 'false' END;
    IF v_t.partitions IS NOT NULL THEN
        -- The key partition: fanout._kpart_of inline (no function call per
        -- row), over the count read with the topic's row; a NULL
        -- message_group at random, as the topic's insert functions do.
        v_kcol := ', kpart';
        v_kpart := ', coalesce(((''x'' || substr(md5(x.g), 1, 8))::bit(32)::bigint % v_parts)::int,
                               floor(random() * v_parts)::int)';
    END IF;
    -- Each operation's messages as rows (p payload, h headers, g
    -- message_group, nokey, num), in publishing order. OFFSET 0 keeps each
    -- transition row's to_jsonb (and a pair's images) computed once: a
    -- subquery pulled up would compute it again at every reference.
    v_ins := format($q$SELECT jsonb_build_object('op', 'insert', 'table', v_table, 'key', %1$s, 'new', %2$s) AS p,
                       v_h AS h, %3$s AS g, %4$s AS nokey, %5$s AS num
                FROM (SELECT to_jsonb(n) AS j FROM fanout_new n OFFSET 0) s$q$, v_key, v_img, v_grp, v_nokey, v_num);
    v_del := format($q$SELECT jsonb_build_object('op', 'delete', 'table', v_table, 'key', %1$s, 'old', %2$s) AS p,
                       v_h AS h, %3$s AS g, %4$s AS nokey, %5$s AS num
                FROM (SELECT to_jsonb(o) AS j FROM fanout_old o OFFSET 0) s$q$, v_key, v_img, v_grp, v_nokey, v_num);
    -- The transition tables hold an UPDATE's old and new rows in step (row
    -- i of each is one updated row); zipped by position, not by key: the
    -- old images as one jsonb array (an uncorrelated subquery: computed
    -- once per statement), element i - 1 beside new row i. No join: a
    -- join on the position planned for the one row of a single-row UPDATE
    -- (a nested loop) and reused by the session's cached plan for a bulk
    -- one rescanned the old side once per new row (2.7 s for 1,000 rows). A pair with the
    -- same key is an update (published when a captured column changed),
    -- one whose key changed a delete of the old key and an insert of the
    -- new one; deletes first, then the rows in the order the statement
    -- wrote them (a sorted subquery is never pulled up: its order holds).
    v_upd := format($q$SELECT CASE z.op
                           WHEN 'update' THEN jsonb_build_object('op', 'update', 'table', v_table, 'key', z.nk,
                                                                 'new', z.nimg, 'old', z.d -> 'old',
                                                                 'changed', z.d -> 'changed')
                           WHEN 'delete' THEN jsonb_build_object('op', 'delete', 'table', v_table, 'key', z.ok,
                                                                 'old', z.oimg)
                           ELSE jsonb_build_object('op', 'insert', 'table', v_table, 'key', z.nk, 'new', z.nimg)
                       END AS p,
                       CASE z.op WHEN 'update' THEN v_h
                                 ELSE jsonb_build_object('pgq_capture', v_table, 'op', z.op) END AS h,
                       CASE z.op WHEN 'delete' THEN z.og ELSE z.ng END AS g, z.nokey,
                       CASE z.op WHEN 'delete' THEN z.onum ELSE z.nnum END AS num
                FROM (SELECT w.*, o.op
                      FROM (SELECT nn.ord, nn.k AS nk, nn.g AS ng, nn.img AS nimg, nn.num AS nnum,
                                   oo.k AS ok, oo.g AS og, oo.img AS oimg, oo.num AS onum, nn.nokey OR oo.nokey AS nokey,
                                   -- The captured columns whose value changed, and their old values.
                                   CASE WHEN nn.k = oo.k THEN
                                       (SELECT jsonb_build_object('changed', to_jsonb(array_agg(c ORDER BY c)),
                                                                  'old', jsonb_object_agg(c, oo.img -> c))
                                        FROM jsonb_object_keys(nn.img) AS c
                                        WHERE nn.img -> c IS DISTINCT FROM oo.img -> c
                                        HAVING count(*) > 0) END AS d
                            FROM (SELECT %1$s AS k, %2$s AS g, %3$s AS img, (%4$s) AS nokey, %5$s AS num, s.ord, s.oj
                                  FROM (SELECT to_jsonb(x) AS j, row_number() OVER () AS ord,
                                               (SELECT jsonb_agg(to_jsonb(y)) FROM fanout_old y)
                                                   -> (row_number() OVER () - 1)::int AS oj
                                        FROM fanout_new x) s
                                  OFFSET 0) nn
                            CROSS JOIN LATERAL (SELECT %1$s AS k, %2$s AS g, %3$s AS img, (%4$s) AS nokey, %5$s AS num
                                                FROM (SELECT nn.oj AS j) s OFFSET 0) oo
                            OFFSET 0) w
                      CROSS JOIN LATERAL unnest(CASE WHEN w.nk IS DISTINCT FROM w.ok THEN '{delete,insert}'::text[]
                                                     WHEN w.d IS NOT NULL THEN '{update}'::text[]
                                                     ELSE '{}'::text[] END) AS o(op)) z
                ORDER BY z.op = 'delete' DESC, z.ord$q$, v_key, v_grp, v_img, v_nokey, v_num);
    v_trunc := $q$SELECT jsonb_build_object('op', 'truncate', 'table', v_table) AS p, v_h AS h, NULL::text AS g,
                       false AS nokey, false AS num$q$;
    -- The messages straight into the topic's table (static SQL, planned
    -- once per session), each through a cheap test: its key present, no
    -- pubsub block, its size within max_payload_bytes (payload, headers and
    -- message_group as text: fanout._check_message's measure, exact), its
    -- message_group valid by the test chosen above. A message that fails
    -- the test goes through fanout._capture_refuse (PGQ03, or
    -- fanout._check_message: PGQ05, PGQ04, PGQ07, naming the element),
    -- which raises, or passes it when the test was only unsure.
    v_write := format($q$INSERT INTO %1$s (headers, message_group, payload%2$s)
                SELECT x.h, x.g,
                       CASE WHEN x.nokey OR v_block
                                 OR octet_length(x.p::text) + v_hlen + coalesce(octet_length(x.g), 0) > v_max
                                 OR CASE WHEN x.num THEN octet_length(x.g) > 512
                                         ELSE x.g IS NOT NULL AND NOT (x.g ~ '^[!-~]' AND char_length(x.g) <= 512
                                                                       AND x.g !~ '[[:cntrl:]]'
                                                                       AND octet_length(x.g) = char_length(x.g)) END
                            THEN fanout._capture_refuse(%3$L, v_table, %4$L, x.nokey, x.p, x.h, x.g, x.i)
                            ELSE x.p END%5$s
                FROM (SELECT r.p, r.h, r.g, r.nokey, r.num, row_number() OVER () AS i FROM ($q$,
                      format('fanout_data.%I', v_t.data_table), v_kcol, v_t.topic,
                      array_to_string(v_c.key_columns, ', '), v_kpart);
    IF v_c.shape = 'statement' THEN
        -- A transition row's image (alias n): the row itself (json_agg
        -- prints it), else its jsonb limited to the capture's columns.
        v_simg := CASE
            WHEN v_c.columns IS NOT NULL THEN
                format('(SELECT coalesce(jsonb_object_agg(e.key, e.value), ''{}'') FROM jsonb_each(to_jsonb(n)) e
                         WHERE e.key = ANY (%L::text[]) AND e.key <> ALL (%L::text[]))', v_c.columns, v_c.exclude_columns)
            WHEN cardinality(v_c.exclude_columns) > 0 THEN format('(to_jsonb(n) - %L::text[])', v_c.exclude_columns)
            ELSE 'n' END;
        v_stmt := format($q$
            -- 3. Shape 'statement': one message for the statement (its rows
            --    per side counted first: inline up to %4$s per side and
            --    within max_payload_bytes, else a claim-check whose rows go
            --    to fanout.capture_chunk in chunks of 500).
            IF TG_OP = 'INSERT' THEN
                SELECT count(*) INTO v_ni FROM fanout_new;
            ELSIF TG_OP = 'DELETE' THEN
                SELECT count(*) INTO v_nd FROM fanout_old;
            ELSIF TG_OP = 'UPDATE' THEN
                SELECT count(*) INTO v_ni FROM fanout_new;
                v_nd := v_ni;
            END IF;
            IF TG_OP = 'TRUNCATE' THEN
                v_p := jsonb_build_object('v', 1, 'op', 'truncate', 'table', v_table);
            ELSIF v_ni + v_nd = 0 THEN
                RETURN NULL;
            ELSIF greatest(v_ni, v_nd) <= %4$s THEN
                v_p := jsonb_build_object('v', 1, 'op', lower(TG_OP), 'table', v_table, 'rows', greatest(v_ni, v_nd));
                IF v_ni > 0 THEN
                    v_p := v_p || jsonb_build_object('inserted', (SELECT json_agg(%3$s) FROM fanout_new n)::jsonb);
                END IF;
                IF v_nd > 0 THEN
                    v_p := v_p || jsonb_build_object('deleted', (SELECT json_agg(%3$s) FROM fanout_old n)::jsonb);
                END IF;
                v_cc := octet_length(v_p::text) + v_hlen + octet_length(v_table) > v_max;
            ELSE
                v_cc := true;
            END IF;
            IF v_cc THEN
                v_p := jsonb_build_object('v', 1, 'op', lower(TG_OP), 'table', v_table, 'rows', greatest(v_ni, v_nd),
                                          'claim_check', jsonb_build_object('inserted', v_ni, 'deleted', v_nd,
                                                                            'chunk_rows', 500));
            END IF;
            IF v_other THEN
                -- Dropped (PGQ01), created again under another id, or made
                -- sequence-ordered: fanout.publish raises what publish
                -- raises, or publishes (the chunks then go under the topic
                -- it published to).
                v_msg := fanout.publish(%1$L, v_p, v_h, v_table);
                SELECT t.topic_id INTO v_id FROM fanout.topic t WHERE t.topic = %1$L;
            ELSE
                %2$s RETURNING id INTO v_msg;
            END IF;
            IF v_cc AND v_ni > 0 THEN
                INSERT INTO fanout.capture_chunk (topic_id, message_id, side, first_row, n_rows, rows)
                SELECT v_id, v_msg, 'inserted', min(s.o), count(*), json_agg(s.img ORDER BY s.o)
                FROM (SELECT %3$s AS img, row_number() OVER () AS o FROM fanout_new n) s
                GROUP BY (s.o - 1) / 500;
            END IF;
            IF v_cc AND v_nd > 0 THEN
                INSERT INTO fanout.capture_chunk (topic_id, message_id, side, first_row, n_rows, rows)
                SELECT v_id, v_msg, 'deleted', min(s.o), count(*), json_agg(s.img ORDER BY s.o)
                FROM (SELECT %3$s AS img, row_number() OVER () AS o FROM fanout_old n) s
                GROUP BY (s.o - 1) / 500;
            END IF;
            RETURN NULL;$q$,
            v_t.topic,
            v_write || 'SELECT v_p AS p, v_h AS h, v_table AS g, false AS nokey, false AS num' || v_tail,
            v_simg, v_c.claim_check_rows);
    END IF;
    -- The body's dollar quote: a random tag that occurs nowhere else in the
    -- function (a topic or a column may be named with any characters).
    LOOP
        v_tag := '$capture_' || substr(md5(random()::text), 1, 16) || '$';
        v_sql := format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I()
        RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, fanout, pg_temp
        AS %11$s
        DECLARE
            v_table    text := format('%%I.%%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
            v_h        jsonb;
            v_hlen     int;
            v_caller   oid;
            v_ok       boolean;
            v_blocked  boolean;
            v_other    boolean := false;
            v_id       bigint;
            v_seqord   boolean;
            v_max      int;
            v_parts    int;
            v_block    boolean;
            v_payloads jsonb[];
            v_groups   text[];
            v_headers  jsonb[];
            v_nokey    boolean;
            v_ni       bigint := 0;
            v_nd       bigint := 0;
            v_p        jsonb;
            v_msg      bigint;
            v_cc       boolean := false;
        BEGIN
            -- 1. The writer's publish grant, by fanout._may's rule for this
            --    topic (superuser or pgq's owner; else fanout_producer and a
            --    publish or admin grant whose pattern matches, held by a role
            --    the caller has the privileges of), the topic's bytes quota
            --    (fanout.quota_block), the topic's row and, for a pubsub
            --    topic that blocks writes without subscriptions, whether it
            --    has none (for such a topic only: a second query): one
            --    static query on every statement, so a grant revoked
            --    meanwhile refuses the next one.
            SELECT c.r,
                   pg_has_role(c.r, n.nspowner, 'USAGE')
                   OR (pg_has_role(c.r, 'fanout_producer', 'USAGE')
                       AND EXISTS (SELECT 1 FROM fanout.topic_grant g
                                   WHERE g.privilege IN ('publish', 'admin')
                                     AND CASE WHEN right(g.pattern, 1) = '%%' THEN starts_with(%2$L, left(g.pattern, -1))
                                              ELSE g.pattern = %2$L END
                                     AND pg_has_role(c.r, g.role, 'USAGE'))),
                   EXISTS (SELECT 1 FROM fanout.quota_block q WHERE q.topic_id = %8$s),
                   t.topic_id, t.sequence_ordering, t.max_payload_bytes, t.partitions,
                   t.semantics = 'pubsub' AND t.block_writes_without_subscriptions
            INTO v_caller, v_ok, v_blocked, v_id, v_seqord, v_max, v_parts, v_block
            FROM (SELECT to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                                     ELSE current_setting('role') END))::oid AS r) c
            JOIN pg_namespace n ON n.nspname = 'fanout'
            LEFT JOIN fanout.topic t ON t.topic = %2$L
            WHERE c.r IS NOT NULL;
            IF v_ok AND NOT v_blocked THEN
                -- A pubsub topic that blocks writes without subscriptions:
                -- whether it has an active one (a query of its own, so that
                -- other topics' statements do not start its plan). The
                -- caller is not noted in fanout.xact_caller as fanout._may
                -- notes it: the note only lets fanout._lock_lease skip its
                -- check of a lease this transaction's caller read, and a
                -- publisher reads none (without it the check runs).
                IF v_block THEN
                    v_block := NOT EXISTS (SELECT 1 FROM fanout.consumer_group cg
                                           WHERE cg.topic_id = v_id AND cg.status = 'active');
                END IF;
            ELSE
                -- Refused or blocked: fanout._enter raises what every
                -- publish raises (PGQ21, PGQ25), with the same messages.
                PERFORM fanout._enter(%2$L, 'publish');
            END IF;
            -- 2. The topic's table, locked as fanout._enter locks it:
            --    fanout.drop_topic takes it ACCESS EXCLUSIVE before anything
            --    else, so the topic cannot be dropped under this statement
            --    (nor before this transaction ends). Once the lock is held
            --    the topic is the one whose row was read (a drop removes row
            --    and table together; a concurrent alter_topic changes
            --    settings a statement may read either way). A table dropped
            --    before or while this waited, a topic created again under
            --    another id or sequence-ordered: the general path below
            --    (PGQ01, or the topic of that name).
            v_other := v_id IS DISTINCT FROM %8$s OR v_seqord;
            IF NOT v_other THEN
                BEGIN
                    LOCK TABLE ONLY %3$s IN ACCESS SHARE MODE;
                EXCEPTION WHEN undefined_table THEN
                    v_other := true;
                END;
            END IF;
            -- The operation's headers (an UPDATE's deletes and inserts have
            -- their own) and their length as text, the same for 'insert',
            -- 'update' and 'delete' (six letters each).
            v_h := jsonb_build_object('pgq_capture', v_table, 'op', lower(TG_OP));
            v_hlen := octet_length(v_h::text);
            %15$s
            IF v_other THEN
                -- Dropped (PGQ01), created again under another id, or made
                -- sequence-ordered: fanout.publish_batch raises what
                -- publish raises, or publishes.
                IF TG_OP = 'INSERT' THEN
                    SELECT array_agg(x.p), array_agg(x.h), array_agg(x.g), bool_or(x.nokey)
                    INTO v_payloads, v_headers, v_groups, v_nokey FROM (%4$s) x;
                ELSIF TG_OP = 'DELETE' THEN
                    SELECT array_agg(x.p), array_agg(x.h), array_agg(x.g), bool_or(x.nokey)
                    INTO v_payloads, v_headers, v_groups, v_nokey FROM (%5$s) x;
                ELSIF TG_OP = 'UPDATE' THEN
                    SELECT array_agg(x.p), array_agg(x.h), array_agg(x.g), bool_or(x.nokey)
                    INTO v_payloads, v_headers, v_groups, v_nokey FROM (%6$s) x;
                ELSE
                    SELECT array_agg(x.p), array_agg(x.h), array_agg(x.g), bool_or(x.nokey)
                    INTO v_payloads, v_headers, v_groups, v_nokey FROM (%7$s) x;
                END IF;
                IF v_payloads IS NULL THEN
                    RETURN NULL;
                END IF;
                IF v_nokey THEN
                    RAISE EXCEPTION 'table %% has no column %% of its captured primary key any more', v_table, %10$L
                        USING ERRCODE = 'PGQ03',
                              HINT = format('the table''s owner calls fanout.capture_table(%%L, %%L) again', v_table, %2$L);
                END IF;
                PERFORM fanout.publish_batch(%2$L, v_payloads, v_headers, v_groups);
                RETURN NULL;
            END IF;
            -- 3. The messages, built set-based from the transition tables
            --    (shape: docs/capture.md) and inserted into the topic's
            --    table by one static INSERT, each checked on its way (see
            --    fanout._capture_generate). The message table's own
            --    triggers run as on every publish (NOTIFY).
            IF TG_OP = 'INSERT' THEN
                %9$s;
            ELSIF TG_OP = 'DELETE' THEN
                %12$s;
            ELSIF TG_OP = 'UPDATE' THEN
                %13$s;
            ELSE
                %14$s;
            END IF;
            RETURN NULL;
        END
        %11$s$ddl$,
        v_fn, v_t.topic, format('fanout_data.%I', v_t.data_table), v_ins, v_del, v_upd, v_trunc, v_t.topic_id,
        v_write || v_ins || v_tail, array_to_string(v_c.key_columns, ', '), v_tag,
        v_write || v_del || v_tail, v_write || v_upd || v_tail, v_write || v_trunc || v_tail, v_stmt);
        EXIT WHEN length(v_sql) - length(replace(v_sql, v_tag, '')) = 2 * length(v_tag);
    END LOOP;
    EXECUTE v_sql;
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I() FROM PUBLIC', v_fn);
    RETURN format('fanout_data.%I()', v_fn)::regprocedure;
END
$fn$;
