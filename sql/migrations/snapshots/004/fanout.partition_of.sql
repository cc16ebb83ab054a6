-- fanout.partition_of(topic, message_group): the key partition (0 .. P-1) a
-- message published to a partitioned topic with this message_group lands in
-- (fanout._kpart_of: first 4 bytes of md5(message_group) as an unsigned
-- big-endian integer, modulo P). NULL for a NULL message_group (those
-- messages are spread at random over the partitions). VOLATILE: its grant
-- check (fanout._authorize) notes the caller.
-- Raises: PGQ01, PGQ03 (the topic is not partitioned), PGQ21 (neither a publish
-- nor a consume grant).
-- Tables: fanout.topic.
CREATE OR REPLACE FUNCTION fanout.partition_of(topic text, message_group text)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t fanout.topic;
BEGIN
    IF NOT fanout._may($1, 'publish') THEN
        PERFORM fanout._authorize($1, 'consume');
    END IF;
    v_t := fanout._topic($1);
    IF v_t.partitions IS NULL THEN
        RAISE EXCEPTION 'topic % is not partitioned', quote_literal($1)
            USING ERRCODE = 'PGQ03', HINT = 'create it with fanout.create_topic(..., partitions => P)';
    END IF;
    RETURN fanout._kpart_of($2, v_t.partitions);
END
$fn$;
