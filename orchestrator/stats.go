package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Row is one row of a view by column name, with values as pgx decodes
// them. Reading views as rows of named columns (SELECT *) keeps status and
// metrics working while the views gain columns.
type Row map[string]any

// Float returns a numeric, interval (in seconds) or duration column as a
// float64; ok is false for NULL, a missing column or another type.
func (r Row) Float(col string) (float64, bool) {
	switch v := r[col].(type) {
	case int16:
		return float64(v), true
	case int32:
		return float64(v), true
	case int64:
		return float64(v), true
	case float32:
		return float64(v), true
	case float64:
		return v, true
	case pgtype.Numeric:
		f, err := v.Float64Value()
		return f.Float64, err == nil && f.Valid
	case pgtype.Interval:
		if !v.Valid {
			return 0, false
		}
		return intervalSeconds(v), true
	case time.Duration:
		return v.Seconds(), true
	}
	return 0, false
}

// Text returns a text column ("" for NULL or a missing column).
// SegmentsCol is the column of fanout.topics with a topic's storage
// segments: "segments", or on a schema before it, its deprecated name
// "partitions" (which on 0.1.0 meant the same).
func (r Row) SegmentsCol() string {
	if _, ok := r["segments"]; ok {
		return "segments"
	}
	return "partitions"
}

func (r Row) Text(col string) string {
	if s, ok := r[col].(string); ok {
		return s
	}
	return ""
}

// Time returns a timestamp column.
func (r Row) Time(col string) (time.Time, bool) {
	t, ok := r[col].(time.Time)
	return t, ok
}

func intervalSeconds(v pgtype.Interval) float64 {
	return float64(v.Microseconds)/1e6 + float64(v.Days)*86400 + float64(v.Months)*30*86400
}

// LeaderInfo is the current holder of the scheduler role.
type LeaderInfo struct {
	ID        string
	ExpiresIn time.Duration
}

// Stats is a snapshot of fanout.topics and fanout.groups.
type Stats struct {
	Topics []Row
	// Groups is nil when the installed schema has no fanout.groups view.
	Groups          []Row
	GroupsAvailable bool
	// KeyPartitions has one row per group of a partitioned topic
	// (fanout.partitions summarized: partitions, unowned, imbalance,
	// max_lag_messages, max_lag_seconds); nil on older schemas.
	KeyPartitions []Row
	// Leader is nil when no sidecar holds the role (or the table is not
	// readable by this user).
	Leader *LeaderInfo
	// Maintenance lists the schema's maintenance functions with their
	// schedules (MaintenanceFuncs); ReadStats leaves it nil, `status` fills
	// it in.
	Maintenance []MaintenanceFunc
}

// ErrNotInstalled means the fanout schema is missing: run migrate.
var ErrNotInstalled = errors.New("schema fanout is not installed (run: pgq-scheduler migrate)")

// ReadStats reads the views behind `status` and /metrics. fanout.groups is
// optional (older schema versions lack it).
func ReadStats(ctx context.Context, db DB, leaderName string) (*Stats, error) {
	var hasTopics, hasGroups, hasLeader, hasParts bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('fanout.topics') IS NOT NULL,
	                                   to_regclass('fanout.groups') IS NOT NULL,
	                                   to_regclass('fanout.leader') IS NOT NULL,
	                                   to_regprocedure('fanout.partition_stats()') IS NOT NULL`).
		Scan(&hasTopics, &hasGroups, &hasLeader, &hasParts); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	if !hasTopics {
		return nil, ErrNotInstalled
	}
	st := &Stats{GroupsAvailable: hasGroups}
	// Both views open every topic's tables: GroupsChunk topics per
	// statement (readGroups), named by the catalog table; a role that may
	// not read it reads fanout.topics in one.
	names, err := queryStrings(ctx, db, `SELECT t.topic FROM fanout.topic t ORDER BY t.topic`)
	switch {
	case err == nil:
		st.Topics, err = readChunks(ctx, db, `SELECT * FROM fanout.topics WHERE topic = ANY($1) ORDER BY topic`,
			names, GroupsChunk)
	case isPrivilegeError(err):
		st.Topics, err = queryRows(ctx, db, `SELECT * FROM fanout.topics ORDER BY topic`)
		names = make([]string, 0, len(st.Topics))
		for _, r := range st.Topics {
			names = append(names, r.Text("topic"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stats: fanout.topics: %w", err)
	}
	if hasGroups {
		if st.Groups, err = readGroups(ctx, db, "*", names, GroupsChunk); err != nil {
			return nil, fmt.Errorf("stats: fanout.groups: %w", err)
		}
	}
	if hasParts {
		// One row per group, never per partition: bounded label cardinality.
		if st.KeyPartitions, err = queryRows(ctx, db, keyPartitionsSQL); err != nil {
			return nil, fmt.Errorf("stats: fanout.partitions: %w", err)
		}
	}
	if hasLeader && leaderName != "" {
		var id string
		var secs float64
		err := db.QueryRow(ctx, `SELECT leader_id, extract(epoch FROM expires_at - clock_timestamp())::float8
		                         FROM fanout.leader WHERE name = $1 AND expires_at > clock_timestamp()`,
			leaderName).Scan(&id, &secs)
		if err == nil {
			st.Leader = &LeaderInfo{ID: id, ExpiresIn: time.Duration(secs * float64(time.Second))}
		} else if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() != nil {
			return nil, fmt.Errorf("stats: leader: %w", err)
		} // other errors (no privilege on the table): leader unknown
	}
	return st, nil
}

func queryRows(ctx context.Context, db DB, sql string) ([]Row, error) {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	fields := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		r := make(Row, len(vals))
		for i, f := range fields {
			r[f.Name] = vals[i]
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// finite maps NaN and infinities (e.g. an "infinity" interval) to 0.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// keyPartitionsSQL summarizes fanout.partitions per group
// (fanout.partition_stats: partitions, unowned, imbalance, max_lag_messages,
// max_lag_seconds).
const keyPartitionsSQL = `SELECT * FROM fanout.partition_stats()`

// GroupsChunk is how many topics one statement on fanout.groups (or
// fanout.topics) covers. The views open each topic's message table (and
// its indexes) to count messages, and a transaction keeps every lock it took:
// a thousand topics in one statement take several thousand locks, past the
// lock table of a server with default settings (max_locks_per_transaction
// 64 x max_connections 100: "out of shared memory"). One statement per
// chunk, each its own transaction, holds a chunk's worth.
const GroupsChunk = 100

// readGroups reads the columns cols of fanout.groups for the topics named
// (in that order; each topic's groups by name, the implicit group first),
// chunk topics per statement. A group of a topic not named is not read.
func readGroups(ctx context.Context, db DB, cols string, topics []string, chunk int) ([]Row, error) {
	return readChunks(ctx, db, `SELECT `+cols+` FROM fanout.groups WHERE topic = ANY($1)
		ORDER BY topic, group_name NULLS FIRST`, topics, chunk)
}

// readChunks runs sql (its $1: an array of topic names) once per chunk of
// topics and returns the rows of all runs in order.
func readChunks(ctx context.Context, db DB, sql string, topics []string, chunk int) ([]Row, error) {
	var out []Row
	for from := 0; from < len(topics); from += chunk {
		rows, err := queryRowsArgs(ctx, db, sql, topics[from:min(len(topics), from+chunk)])
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// queryStrings reads a one-column text query.
func queryStrings(ctx context.Context, db DB, sql string) ([]string, error) {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
