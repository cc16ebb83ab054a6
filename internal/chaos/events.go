package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scripted events of the soak: administrative calls made during the load
// and the faults, at fixed points (fractions of the duration), in the
// faults' loop (so never at the same time as one of them):
//
//   - subscribe: a new group "late" subscribes to chaos.offset with
//     'earliest' and gets a member; it must get every message committed
//     after it subscribed (earlier ones it may get, within retention);
//   - pause, resume: group s1 of the sequence topic stops for a few
//     seconds, its members reading meanwhile;
//   - seek: "late" seeks to 'earliest' again (a rewind: what it had comes
//     again);
//   - replay: "late" gets up to 20 messages it had settled again;
//   - alter: chaos.kpart goes from 8 to 12 key partitions, after its
//     producer paused and both groups caught up (so that keys that move do
//     not break their order: README, Ordering).
//
// The group "late" is judged as scripted: seek and replay hand messages out
// again with attempt 1, so its redeliveries are not classified.
var soakEvents = []struct {
	at   float64
	kind string
}{
	{0.12, "subscribe"}, {0.30, "pause"}, {0.36, "resume"}, {0.45, "seek"}, {0.58, "replay"}, {0.68, "alter"},
}

const (
	lateTopic  = "chaos.offset"
	lateGroup  = "late"
	pauseTopic = "chaos.seq"
	pauseGroup = "s1"
	alterTopic = "chaos.kpart"
	alterTo    = 12
)

// eventLog is what the events did, for the report.
type eventLog struct {
	done     []string
	failed   []string
	pausedAt time.Time
}

// event runs one scripted event, retried (a fault may be under way) for up
// to 90 s.
func (f *fleet) event(ctx context.Context, kind string, el *eventLog) {
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for {
		var note string
		note, err = f.eventOnce(ctx, kind, el)
		if err == nil {
			el.done = append(el.done, kind+note)
			f.cfg.Logger.Info("event", "event", kind, "note", note)
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		f.cfg.Logger.Warn("event failed; retrying", "event", kind, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	el.failed = append(el.failed, fmt.Sprintf("%s: %v", kind, err))
	f.cfg.Logger.Error("event failed", "event", kind, "error", err)
}

func (f *fleet) eventOnce(ctx context.Context, kind string, el *eventLog) (string, error) {
	conn, err := pgx.Connect(ctx, f.adminDB)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	switch kind {
	case "subscribe":
		if f.group(lateTopic, lateGroup) != nil {
			return " (again)", nil
		}
		var from *int64
		// Subscribed (committed) before since: what commits after it is
		// owed to the group.
		if err := conn.QueryRow(ctx, `SELECT effective_start_message_id FROM fanout.subscribe($1, $2, 'earliest',
			heartbeat_timeout => '10 minutes')`, lateTopic, lateGroup).Scan(&from); err != nil {
			return "", err
		}
		return fmt.Sprintf(" (earliest: from message %v)", deref(from)),
			f.addGroup(lateTopic, groupSpec{name: lateGroup, workers: []string{kindSQL}, since: time.Now(), scripted: true})
	case "pause", "resume":
		if kind == "resume" {
			// Paused for 3 s at least, whatever delayed the events.
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Until(el.pausedAt.Add(3 * time.Second))):
			}
		}
		var status string
		if err := conn.QueryRow(ctx, `SELECT fanout.`+kind+`($1, $2)`, pauseTopic, pauseGroup).Scan(&status); err != nil {
			// Done already (the call committed, its reply was lost)?
			var cur string
			if e := conn.QueryRow(ctx, `SELECT status FROM fanout.groups WHERE topic = $1 AND group_name = $2`,
				pauseTopic, pauseGroup).Scan(&cur); e == nil && cur == map[string]string{"pause": "paused", "resume": "active"}[kind] {
				if kind == "pause" {
					el.pausedAt = time.Now()
				}
				return " (" + pauseGroup + ", done before)", nil
			}
			return "", err
		}
		if kind == "pause" {
			el.pausedAt = time.Now()
		}
		return " " + pauseGroup + ": " + status, nil
	case "seek":
		if f.group(lateTopic, lateGroup) == nil {
			return "", fmt.Errorf("no group %s", lateGroup)
		}
		var from *int64
		if err := conn.QueryRow(ctx, `SELECT fanout.seek($1, $2, 'earliest')`, lateTopic, lateGroup).Scan(&from); err != nil {
			return "", err
		}
		return fmt.Sprintf(" %s earliest (from message %v)", lateGroup, deref(from)), nil
	case "replay":
		// Settled by the group, newest first (their partition is retained).
		rows, err := conn.Query(ctx, `SELECT DISTINCT m FROM chaos.lease_all l
				JOIN fanout.consumer_group g USING (group_id) JOIN fanout.topic t USING (topic_id),
				unnest(l.settled) m
			WHERE t.topic = $1 AND g.group_name = $2 ORDER BY m DESC LIMIT 20`, lateTopic, lateGroup)
		if err != nil {
			return "", err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return "", err
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT fanout.replay($1, $2, $3)`, lateTopic, lateGroup, ids).Scan(&n); err != nil {
			return "", err
		}
		return fmt.Sprintf(" %s: %d of %d settled messages", lateGroup, n, len(ids)), nil
	case "alter":
		return f.alterPartitions(ctx, conn)
	}
	return "", fmt.Errorf("unknown event %q", kind)
}

// alterPartitions raises the key-partitioned topic's P once its producer
// is held and its groups caught up.
func (f *fleet) alterPartitions(ctx context.Context, conn *pgx.Conn) (string, error) {
	var p int
	if err := conn.QueryRow(ctx, `SELECT partitions FROM fanout.topic WHERE topic = $1`, alterTopic).Scan(&p); err != nil {
		return "", err
	}
	if p >= alterTo {
		return " (done before)", nil
	}
	if f.kprod == nil {
		return "", fmt.Errorf("no producer for %s", alterTopic)
	}
	f.kprod.hold.Lock()
	defer f.kprod.hold.Unlock()
	start := time.Now()
	for {
		var busy int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM fanout.groups WHERE topic = $1
				AND (lag_messages > 0 OR in_flight > 0 OR retry_pending > 0)`, alterTopic).Scan(&busy); err != nil {
			return "", err
		}
		if busy == 0 {
			break
		}
		// (after a restart the members come back within seconds, and
		// pages of killed members wait for their lease)
		if time.Since(start) > 60*time.Second {
			return "", fmt.Errorf("%s: groups did not catch up within 60 s", alterTopic)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx, `SELECT fanout.alter_topic($1, partitions => $2)`, alterTopic, alterTo); err != nil {
		return "", err
	}
	return fmt.Sprintf(" %s: P %d -> %d (producer held %s)", alterTopic, p, alterTo,
		time.Since(start).Round(100*time.Millisecond)), nil
}

// group returns the spec of a group of the run, nil if none.
func (f *fleet) group(topic, name string) *groupSpec {
	for i := range f.topics {
		if f.topics[i].name != topic {
			continue
		}
		for j := range f.topics[i].groups {
			if f.topics[i].groups[j].name == name {
				return &f.topics[i].groups[j]
			}
		}
	}
	return nil
}

// addGroup adds a group (subscribed already) to a topic of the run and
// starts its workers.
func (f *fleet) addGroup(topic string, g groupSpec) error {
	for i := range f.topics {
		if f.topics[i].name == topic {
			f.topics[i].groups = append(f.topics[i].groups, g)
			return f.startGroup(f.topics[i], g)
		}
	}
	return fmt.Errorf("no topic %s", topic)
}

func (el *eventLog) String() string {
	s := "events: " + strings.Join(el.done, "; ")
	if len(el.failed) > 0 {
		s += "; FAILED: " + strings.Join(el.failed, "; ")
	}
	return s
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}
