package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// segmentInterval reads a topic's segment interval under both of the topics
// view's names (segment_interval, and partition_interval, its deprecated
// alias) and its segment count under both (segments, partitions).
func (b *bundle) segmentInterval(t *testing.T, topic string) (seg, part string, segments, partitions int) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT segment_interval::text, partition_interval::text, segments, partitions
		FROM fanout.topics WHERE topic = $1`, topic).Scan(&seg, &part, &segments, &partitions))
	return seg, part, segments, partitions
}

// create_topic and alter_topic take segment_interval and its deprecated
// alias partition_interval: either name gives the same topic, both with the
// same value are accepted, both with different values are refused (PGQ03)
// and change nothing.
func TestSegmentIntervalAlias(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fails := func(t *testing.T, state, sql string) {
		t.Helper()
		_, err := b.Pool.Exec(b.ctx, sql)
		requireSQLState(t, err, state)
	}

	b.createTopic(t, b.Pool, "seg.default")
	seg, part, segments, partitions := b.segmentInterval(t, "seg.default")
	require.Equal(t, "01:00:00", seg, "the default is one hour")
	require.Equal(t, seg, part)
	require.Equal(t, 1, segments, "the first segment is made at creation")
	require.Equal(t, segments, partitions)

	id := b.createTopic(t, b.Pool, "seg.new", "segment_interval => '2 hours'")
	oldID := b.createTopic(t, b.Pool, "seg.old", "partition_interval => '2 hours'")
	b.createTopic(t, b.Pool, "seg.both", "segment_interval => '2 hours'", "partition_interval => '2 hours'")
	for _, topic := range []string{"seg.new", "seg.old", "seg.both"} {
		seg, part, _, _ := b.segmentInterval(t, topic)
		require.Equal(t, "02:00:00", seg, topic)
		require.Equal(t, "02:00:00", part, topic)
	}
	// Idempotent across the names: the same setting under either name.
	require.Equal(t, id, b.createTopic(t, b.Pool, "seg.new", "partition_interval => '2 hours'"))
	require.Equal(t, oldID, b.createTopic(t, b.Pool, "seg.old", "segment_interval => '2 hours'"))
	fails(t, "PGQ02", "SELECT fanout.create_topic('seg.new', segment_interval => '3 hours')")
	fails(t, "PGQ03", "SELECT fanout.create_topic('seg.mixed', segment_interval => '2 hours', partition_interval => '3 hours')")
	fails(t, "PGQ03", "SELECT fanout.create_topic('seg.short', segment_interval => '10 seconds')")
	var n int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.topics WHERE topic = 'seg.mixed'").Scan(&n))
	require.Zero(t, n, "a refused create_topic makes nothing")

	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('seg.new', segment_interval => '3 hours')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('seg.old', partition_interval => '3 hours')")
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('seg.both', segment_interval => '3 hours', partition_interval => '3 hours')")
	require.NoError(t, err)
	for _, topic := range []string{"seg.new", "seg.old", "seg.both"} {
		seg, part, _, _ := b.segmentInterval(t, topic)
		require.Equal(t, "03:00:00", seg, topic)
		require.Equal(t, "03:00:00", part, topic)
	}
	fails(t, "PGQ03", "SELECT fanout.alter_topic('seg.new', segment_interval => '4 hours', partition_interval => '5 hours')")
	fails(t, "PGQ03", "SELECT fanout.alter_topic('seg.new', segment_interval => '1 second')")
	seg, _, _, _ = b.segmentInterval(t, "seg.new")
	require.Equal(t, "03:00:00", seg, "a refused alter_topic changes nothing")
}

// The topics view shows what the newest features set: has_filters (some
// group of the topic has a filter now), priorities_dropped_at and
// completion_switch_in_progress.
func TestTopicsViewFeatureColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type row struct {
		hasFilters, switching bool
		prioritiesDropped     *time.Time
	}
	get := func(topic string) row {
		t.Helper()
		var r row
		require.NoError(t, b.Pool.QueryRow(b.ctx, `SELECT has_filters, priorities_dropped_at, completion_switch_in_progress
			FROM fanout.topics WHERE topic = $1`, topic).Scan(&r.hasFilters, &r.prioritiesDropped, &r.switching))
		return r
	}

	b.createTopic(t, b.Pool, "tv.filters", "semantics => 'pubsub'")
	b.subscribe(t, "tv.filters", "plain")
	require.Equal(t, row{}, get("tv.filters"))
	b.subscribe(t, "tv.filters", "f", `filter => '{"type": "a"}'`)
	require.True(t, get("tv.filters").hasFilters)
	_, err := b.Pool.Exec(b.ctx, "SELECT fanout.set_filter('tv.filters', 'f', NULL)")
	require.NoError(t, err)
	require.False(t, get("tv.filters").hasFilters, "no group has a filter once the last is cleared")
	_, err = b.Pool.Exec(b.ctx, `SELECT fanout.set_filter('tv.filters', 'plain', '{"type": "b"}')`)
	require.NoError(t, err)
	require.True(t, get("tv.filters").hasFilters)

	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('tv.filters', priorities => false)")
	require.NoError(t, err)
	require.NotNil(t, get("tv.filters").prioritiesDropped)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('tv.filters', priorities => true)")
	require.NoError(t, err)
	require.Nil(t, get("tv.filters").prioritiesDropped)

	b.refTopic(t, "tv.switch", "retention => '0'", "zero_subscription_retention => '0'", "segment_interval => '1 minute'")
	b.subscribe(t, "tv.switch", "A")
	require.False(t, get("tv.switch").switching)
	_, err = b.Pool.Exec(b.ctx, "SELECT fanout.alter_topic('tv.switch', completion => 'offset')")
	require.NoError(t, err)
	require.True(t, get("tv.switch").switching, "until maintenance finishes the switch")
	for i := 0; i < 3; i++ {
		_, err = b.Pool.Exec(b.ctx, "SELECT fanout._manage_partitions(p_now => now() + interval '2 hours')")
		require.NoError(t, err)
		b.cleanup(t, "2 hours")
	}
	_, done, _ := b.switchState(t, "tv.switch")
	require.True(t, done)
	require.False(t, get("tv.switch").switching)
}
