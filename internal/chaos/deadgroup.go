package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// runDeadGroup is the dead-group retention scenario, on a simulated clock
// (the p_now argument of the maintenance functions) instead of sleeps: an
// offset-mode topic with a live group that keeps pace and a victim group
// that reads a little, then stops. Every round publishes a batch, moves the
// clock 2 minutes, rotates the partition, runs dead detection and cleanup.
// Once the victim is dead its unread partitions are dropped: storage must
// stay bounded (at most 3 partitions, 3 rounds of messages), and when the
// victim comes back, read before + lost_messages + read after must equal
// what was published.
func runDeadGroup(ctx context.Context, cfg Config, out io.Writer) error {
	log := cfg.Logger.With("scenario", "deadgroup")
	cl := &cluster{root: cfg.Root, name: cfg.Cluster, port: cfg.Port}
	admin, err := cl.start(ctx)
	if err != nil {
		return err
	}
	dbURL, err := freshDatabase(ctx, admin, "chaos_deadgroup")
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	exec := func(sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("deadgroup: %s: %w", sql, err)
		}
		return nil
	}
	const topic, perRound = "dg", 200
	if err := exec(`SELECT fanout.create_topic($1, semantics => 'pubsub', partition_interval => '1 minute',
		retention => '1 minute', max_attempts => 1000)`, topic); err != nil {
		return err
	}
	if err := exec(`SELECT * FROM fanout.subscribe($1, 'live', heartbeat_timeout => '1 hour')`, topic); err != nil {
		return err
	}
	// The victim reads in rounds 0 and 1 (simulated 2 and 4 minutes) and
	// is dead from 6 minutes after its last sign of life: round 2.
	if err := exec(`SELECT * FROM fanout.subscribe($1, 'victim', heartbeat_timeout => '2 minutes',
		dead_after_misses => 3)`, topic); err != nil {
		return err
	}
	// readAll reads and acks up to limit messages of group (0: until empty).
	readAll := func(group string, limit int) (int, error) {
		n := 0
		for {
			page := 1000
			if limit > 0 {
				page = min(page, limit-n)
				if page == 0 {
					return n, nil
				}
			}
			rows, err := conn.Query(ctx, `SELECT lease_id FROM fanout.read($1, $2, $2 || '-1', $3)`, topic, group, page)
			if err != nil {
				return n, err
			}
			leases, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return n, err
			}
			if len(leases) == 0 {
				return n, nil
			}
			if _, err := conn.Exec(ctx, `SELECT fanout.ack($1)`, leases[0]); err != nil {
				return n, err
			}
			n += len(leases)
		}
	}
	var clock time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&clock); err != nil {
		return err
	}
	published, before := 0, 0
	maxParts, maxMsgs, deadAt := int64(0), int64(0), -1
	for r := range cfg.DeadGroupRounds {
		if err := exec(`SELECT fanout.publish_batch($1, array_agg(jsonb_build_object('k', $2::int * 1000 + i)))
			FROM generate_series(1, $3) i`, topic, r, perRound); err != nil {
			return err
		}
		published += perRound
		if _, err := readAll("live", 0); err != nil {
			return fmt.Errorf("deadgroup: live read: %w", err)
		}
		if r < 2 {
			n, err := readAll("victim", perRound*3/4)
			if err != nil {
				return fmt.Errorf("deadgroup: victim read: %w", err)
			}
			before += n
		}
		clock = clock.Add(2 * time.Minute)
		for range 3 { // rotation is three steps, one per call
			if err := exec(`SELECT fanout._manage_partitions($1)`, clock); err != nil {
				return err
			}
		}
		if err := exec(`SELECT fanout._detect_dead_groups($1)`, clock); err != nil {
			return err
		}
		for range 20 {
			var n int
			if err := conn.QueryRow(ctx, `SELECT fanout._cleanup_partitions($1)`, clock).Scan(&n); err != nil {
				return fmt.Errorf("deadgroup: cleanup: %w", err)
			}
			if n == 0 {
				break
			}
		}
		var status string
		var parts, msgs int64
		if err := conn.QueryRow(ctx, `SELECT g.status, t.partitions, t.messages FROM fanout.groups g
			JOIN fanout.topics t USING (topic) WHERE g.topic = $1 AND g.group_name = 'victim'`, topic).
			Scan(&status, &parts, &msgs); err != nil {
			return fmt.Errorf("deadgroup: status: %w", err)
		}
		if status == "dead" && deadAt < 0 {
			deadAt = r
		}
		if deadAt >= 0 && r > deadAt+1 { // the first rounds after death still hold the victim's leftovers
			maxParts, maxMsgs = max(maxParts, parts), max(maxMsgs, msgs)
		}
		log.Info("round", "round", r, "victim", status, "partitions", parts, "messages", msgs)
	}
	// A last batch that no cleanup sees: the resurrected victim reads it.
	if err := exec(`SELECT fanout.publish_batch($1, array_agg(jsonb_build_object('k', -i)))
		FROM generate_series(1, $2) i`, topic, perRound); err != nil {
		return err
	}
	published += perRound
	var lost int64
	if err := conn.QueryRow(ctx, `SELECT lost_messages FROM fanout.groups WHERE topic = $1 AND group_name = 'victim'`,
		topic).Scan(&lost); err != nil {
		return err
	}
	after, err := readAll("victim", 0)
	if err != nil {
		return fmt.Errorf("deadgroup: victim read after: %w", err)
	}
	var status string
	if err := conn.QueryRow(ctx, `SELECT status FROM fanout.groups WHERE topic = $1 AND group_name = 'victim'`,
		topic).Scan(&status); err != nil {
		return err
	}
	var problems []string
	rows, err := conn.Query(ctx, `SELECT format('%s %s %s %s: %s', topic, coalesce(group_name, '-'), message_id, status, problem)
		FROM fanout.check_consistency()`)
	if err != nil {
		return err
	}
	cons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== deadgroup: %d rounds of %d messages, 2 simulated minutes each (p_now), and a last batch\n",
		cfg.DeadGroupRounds, perRound)
	fmt.Fprintf(out, "victim: dead from round %d; read before %d + lost_messages %d + read after resurrection %d = %d; "+
		"published %d; status now %s\n", deadAt, before, lost, after, int64(before)+lost+int64(after), published, status)
	fmt.Fprintf(out, "storage while dead (from round %d on): at most %d partitions, %d messages\n", deadAt+2, maxParts, maxMsgs)
	if deadAt < 2 || after < perRound {
		problems = append(problems, fmt.Sprintf("the victim should die after its last read (round 1; died in round %d) "+
			"and read at least the last batch after resurrection (read %d)", deadAt, after))
	}
	if deadAt < 0 {
		problems = append(problems, "the victim never became dead")
	}
	if int64(before)+lost+int64(after) != int64(published) {
		problems = append(problems, fmt.Sprintf("read before %d + lost %d + read after %d = %d, published %d",
			before, lost, after, int64(before)+lost+int64(after), published))
	}
	if deadAt >= 0 && deadAt+2 < cfg.DeadGroupRounds && (maxParts > 3 || maxMsgs > 3*perRound) {
		problems = append(problems, fmt.Sprintf("storage not bounded while dead: %d partitions, %d messages", maxParts, maxMsgs))
	}
	if len(cons) > 0 {
		problems = append(problems, fmt.Sprintf("check_consistency: %v", cons))
	}
	if len(problems) > 0 {
		return errors.New(fmt.Sprint(problems))
	}
	fmt.Fprintln(out, "deadgroup: ok")
	return nil
}
