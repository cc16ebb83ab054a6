-- fanout._check_topic_settings(p_t): validates a topic's settings before it is
-- created or altered. Every setting has an upper bound too (README, "Limits"):
-- retention, zero_subscription_retention, max_retention and zombie_ttl at
-- most 3650 days, segment_interval (column partition_interval) at most 365 days, so that maintenance
-- can always compute with them (a setting of 178,000,000 years made every
-- timestamp computation of maintenance fail). partitions: NULL or 1..1024;
-- whole_transactions only with partitions; sequence_ordering not with
-- partitions (not combined: a partitioned topic is read by key partition).
-- max_groups: NULL (create_topic: the column's default) or 1..1000000.
-- notify_when: 'always' or 'waiters' (docs/wakeups.md).
-- Raises PGQ03 naming the first bad setting. Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_topic_settings(p_t fanout.topic)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_t.retention IS NULL OR p_t.retention < interval '0' OR p_t.retention > interval '3650 days' THEN
        RAISE EXCEPTION 'retention must be an interval from 0 to 3650 days, got %', coalesce(p_t.retention::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.zero_subscription_retention IS NULL OR p_t.zero_subscription_retention < interval '0'
       OR p_t.zero_subscription_retention > interval '3650 days' THEN
        RAISE EXCEPTION 'zero_subscription_retention must be an interval from 0 to 3650 days, got %',
            coalesce(p_t.zero_subscription_retention::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.max_retention > interval '3650 days' THEN
        RAISE EXCEPTION 'max_retention must be at most 3650 days, got %', p_t.max_retention USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.max_retention IS NULL OR p_t.max_retention < p_t.retention
       OR p_t.max_retention < p_t.zero_subscription_retention THEN
        RAISE EXCEPTION 'max_retention (%) must be at least retention (%) and zero_subscription_retention (%)',
            coalesce(p_t.max_retention::text, 'NULL'), p_t.retention, p_t.zero_subscription_retention
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.block_writes_without_subscriptions IS NULL THEN
        RAISE EXCEPTION 'block_writes_without_subscriptions must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.max_attempts IS NULL OR p_t.max_attempts < 1 OR p_t.max_attempts > 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', coalesce(p_t.max_attempts::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.max_payload_bytes IS NULL OR p_t.max_payload_bytes < 1 OR p_t.max_payload_bytes > 104857600 THEN
        RAISE EXCEPTION 'max_payload_bytes must be between 1 and 104857600, got %',
            coalesce(p_t.max_payload_bytes::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.zombie_ttl IS NULL OR p_t.zombie_ttl <= interval '0' OR p_t.zombie_ttl > interval '3650 days' THEN
        RAISE EXCEPTION 'zombie_ttl must be a positive interval of at most 3650 days, got %',
            coalesce(p_t.zombie_ttl::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.notify IS NULL THEN
        RAISE EXCEPTION 'notify must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.notify_when IS NULL OR p_t.notify_when NOT IN ('always', 'waiters') THEN
        RAISE EXCEPTION 'notify_when must be ''always'' or ''waiters'', got %', coalesce(quote_literal(p_t.notify_when), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.partition_interval IS NULL OR p_t.partition_interval < interval '1 minute'
       OR p_t.partition_interval > interval '365 days' THEN
        RAISE EXCEPTION 'segment_interval (partition_interval) must be from 1 minute to 365 days, got %',
            coalesce(p_t.partition_interval::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.dedupe_window IS NULL OR p_t.dedupe_window < interval '0' OR p_t.dedupe_window > interval '30 days' THEN
        RAISE EXCEPTION 'dedupe_window must be an interval from 0 to 30 days, got %',
            coalesce(p_t.dedupe_window::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.partitions IS NOT NULL AND (p_t.partitions < 1 OR p_t.partitions > 1024) THEN
        RAISE EXCEPTION 'partitions must be between 1 and 1024 (or NULL: unpartitioned), got %', p_t.partitions
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.whole_transactions IS NULL THEN
        RAISE EXCEPTION 'whole_transactions must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.whole_transactions AND p_t.partitions IS NULL THEN
        RAISE EXCEPTION 'whole_transactions applies to partitioned topics only'
            USING ERRCODE = 'PGQ03', HINT = 'create the topic with partitions => P (P = 1 keeps one total order)';
    END IF;
    IF p_t.sequence_ordering IS NULL THEN
        RAISE EXCEPTION 'sequence_ordering must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.gap_alert_after IS NULL OR p_t.gap_alert_after < interval '0' OR p_t.gap_alert_after > interval '30 days' THEN
        RAISE EXCEPTION 'gap_alert_after must be an interval from 0 to 30 days, got %',
            coalesce(p_t.gap_alert_after::text, 'NULL') USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.max_groups < 1 OR p_t.max_groups > 1000000 THEN
        RAISE EXCEPTION 'max_groups must be between 1 and 1000000, got %', p_t.max_groups USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.sequence_ordering AND p_t.partitions IS NOT NULL THEN
        -- Not combined (yet): a partitioned topic is read by key partition
        -- (fanout._kpart_read), which does not hold messages back for their
        -- sequence.
        RAISE EXCEPTION 'sequence_ordering does not apply to partitioned topics'
            USING ERRCODE = 'PGQ03',
                  HINT = 'a partitioned topic already keeps per-key order (one key partition per message_group); '
                         'create the topic with either partitions or sequence_ordering';
    END IF;
END
$fn$;
