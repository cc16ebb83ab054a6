-- fanout.channel_name(topic_id): the LISTEN channel of a topic,
-- fanout_<topic_id> (an identifier no matter what the topic is called).
-- fanout.topics shows it per topic. Touches no table.
CREATE OR REPLACE FUNCTION fanout.channel_name(topic_id bigint)
RETURNS text
LANGUAGE sql IMMUTABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$ SELECT 'fanout_' || $1 $fn$;
