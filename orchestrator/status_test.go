package orchestrator

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// WriteStatus on rows as fanout.groups returns them during a backfill (the
// backfill figures come from the view; no database needed to format them).
func TestWriteStatusBackfills(t *testing.T) {
	t.Parallel()
	iv := func(d time.Duration) pgtype.Interval {
		return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
	}
	st := &Stats{
		Leader: &LeaderInfo{ID: "sidecar-2", ExpiresIn: 9 * time.Second},
		Topics: []Row{{"topic": "events", "semantics": "pubsub", "completion": "reference", "active_groups": int64(2),
			"messages": int64(120000), "oldest_message_age": iv(90 * time.Minute), "partitions": int32(3),
			"bytes": int64(5 << 20), "dropped_unread": int64(0)}},
		GroupsAvailable: true,
		Groups: []Row{
			{"topic": "events", "group_name": "search", "status": "active", "members": int32(3),
				"last_heartbeat": time.Now().Add(-2 * time.Second), "lag_messages": int64(250), "lag_seconds": 3.0,
				"in_flight": int64(10), "dead_letters": int64(0), "lost_messages": int64(0),
				"backfill_status": "running", "backfill_processed": int64(4000), "backfill_total": int64(10000),
				"backfill_rate": 812.5, "backfill_eta": iv(8 * time.Second)},
			{"topic": "events", "group_name": "billing", "status": "active", "backfill_status": "not_needed"},
		},
	}
	var out strings.Builder
	require.NoError(t, WriteStatus(&out, st))
	s := out.String()
	t.Log("\n" + s)
	require.Contains(t, s, "leader: sidecar-2 (lease expires in 9s)")
	require.Contains(t, s, "events  pubsub     reference   2              120000    1h30m0s  3         5.0 MiB  0")
	require.Contains(t, s, "OLDEST   SEGMENTS  SIZE", "a 0.1.0 schema's partitions column is the segments")
	require.Contains(t, s, "events  search   ACTIVE  3        250  3s       -               10         0             0     2s ago          running 40%")
	require.Contains(t, s, "BACKFILLS\nTOPIC   GROUP   STATUS   PROCESSED  TOTAL  PROGRESS  RATE/S  ETA\n"+
		"events  search  running  4000       10000  40%       812.5   8s\n")
	require.NotContains(t, s, "not_needed", "finished or unneeded backfills are not listed")
	require.NotContains(t, s, "dead groups")
}
