package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// runHAAsync is make ha's asynchronous variant, on the same Patroni
// cluster after the synchronous run: synchronous_mode off (what a
// non-strict manager falls back to when its synchronous standby is gone),
// the leader's WAL senders stopped (SIGSTOP: no standby receives anything
// more), a page read on the leader, the leader SIGKILLed (Patroni and
// PostgreSQL), a replica promoted by Patroni. The worker that holds the
// pre-failover page acks it on the new primary: it must be fenced (PGQ11),
// and a new consumer gets and settles every message of that page the new
// primary has, with the ones published since. It returns what it found
// wrong.
func runHAAsync(ctx context.Context, pc *patroniCluster, out io.Writer, log func(string, ...any)) []string {
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, "async: "+fmt.Sprintf(format, args...))
	}
	st, err := pc.status()
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	leader := pc.node(st.leader())
	if leader == nil {
		return []string{"async: no leader"}
	}
	if err := pc.patchConfig(leader, `{"synchronous_mode": false, "synchronous_mode_strict": false}`); err != nil {
		return []string{"async: " + err.Error()}
	}
	const dbName = "ha_fence"
	u, err := freshDatabase(ctx, leader.url("postgres"), dbName)
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	db, err := pgx.Connect(ctx, u)
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	defer db.Close(context.Background())
	if err := waitFor(ctx, 60*time.Second, func() error {
		var names string
		if err := db.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names')`).Scan(&names); err != nil {
			return err
		}
		if names != "" {
			return fmt.Errorf("synchronous_standby_names still %q", names)
		}
		return nil
	}); err != nil {
		return []string{"async: Patroni did not switch replication to asynchronous: " + err.Error()}
	}
	exec := func(c *pgx.Conn, sql string, args ...any) error {
		_, err := c.Exec(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	}
	publish := func(c *pgx.Conn, n int, tag string) error {
		for i := range n {
			if err := exec(c, `SELECT fanout.publish('q', jsonb_build_object('tag', $1::text, 'i', $2::int))`, tag, i); err != nil {
				return err
			}
		}
		return nil
	}
	read := func(c *pgx.Conn, consumer string) (int64, map[int64]string, error) {
		rows, err := c.Query(ctx, `SELECT lease_id, message_id, payload->>'tag' FROM fanout.read('q', consumer => $1)`, consumer)
		if err != nil {
			return 0, nil, err
		}
		var lease int64
		got := map[int64]string{}
		for rows.Next() {
			var id int64
			var tag string
			if err := rows.Scan(&lease, &id, &tag); err != nil {
				return 0, nil, err
			}
			got[id] = tag
		}
		return lease, got, rows.Err()
	}
	if err := exec(db, `SELECT fanout.create_topic('q', max_attempts => 10)`); err != nil {
		return []string{"async: " + err.Error()}
	}
	// One page handed out and settled first: the lost page is the slot's
	// second (the slot row itself is replicated).
	if err := publish(db, 1, "before"); err != nil {
		return []string{"async: " + err.Error()}
	}
	l0, _, err := read(db, "w0")
	if err == nil {
		err = exec(db, `SELECT fanout.ack($1)`, l0)
	}
	if err == nil {
		err = publish(db, 3, "replicated")
	}
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	// Every replica has it all; then the WAL senders stop.
	if err := waitFor(ctx, 60*time.Second, func() error {
		var behind int
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE replay_lsn < pg_current_wal_lsn()) + 2 - count(*)
			FROM pg_stat_replication`).Scan(&behind); err != nil {
			return err
		}
		if behind > 0 {
			return errors.New("replicas behind")
		}
		return nil
	}); err != nil {
		return []string{"async: " + err.Error()}
	}
	var senders []int
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_replication`)
	if err == nil {
		senders, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	for _, p := range senders {
		_ = syscall.Kill(p, syscall.SIGSTOP)
	}
	log("async: WAL senders stopped", "leader", leader.name, "senders", len(senders))
	if err := publish(db, 3, "lost"); err != nil {
		return []string{"async: " + err.Error()}
	}
	w1, err := pgx.Connect(ctx, u)
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	l1, p1, err := read(w1, "w1")
	w1.Close(context.Background())
	if err != nil {
		return []string{"async: " + err.Error()}
	}
	db.Close(context.Background())
	crashAt := time.Now()
	if err := leader.crash(); err != nil {
		fail("%v", err)
	}
	newLeader := ""
	if err := waitFor(ctx, 90*time.Second, func() error {
		s, err := pc.status()
		if err != nil {
			return err
		}
		if l := s.leader(); l != "" && l != leader.name {
			newLeader = l
			return nil
		}
		return errors.New("no new leader")
	}); err != nil {
		return append(problems, "async: no new leader after the crash: "+err.Error())
	}
	multi := pc.multiURL(dbName)
	if err := waitReady(ctx, multi, 60*time.Second); err != nil {
		return append(problems, "async: "+err.Error())
	}
	took := time.Since(crashAt)
	db2, err := pgx.Connect(ctx, multi)
	if err != nil {
		return append(problems, "async: "+err.Error())
	}
	defer db2.Close(context.Background())
	if err := publish(db2, 3, "after"); err != nil {
		return append(problems, "async: "+err.Error())
	}
	w2, err := pgx.Connect(ctx, multi)
	if err != nil {
		return append(problems, "async: "+err.Error())
	}
	defer w2.Close(context.Background())
	l2, p2, err := read(w2, "w2")
	if err != nil {
		return append(problems, "async: "+err.Error())
	}
	// The stale worker, reconnected through the multi-host URL, acks its
	// pre-failover page.
	stale, err := pgx.Connect(ctx, multi)
	if err != nil {
		return append(problems, "async: "+err.Error())
	}
	defer stale.Close(context.Background())
	var staleN int
	err = stale.QueryRow(ctx, `SELECT fanout.ack($1)`, l1).Scan(&staleN)
	var pe *pgconn.PgError
	staleCode := "OK"
	if errors.As(err, &pe) {
		staleCode = pe.Code
	} else if err != nil {
		staleCode = err.Error()
	}
	if staleCode != "PGQ11" {
		fail("the stale ack of lease %d after the failover returned %s (%d settled), want PGQ11", l1, staleCode, staleN)
	}
	var n2 int
	if err := w2.QueryRow(ctx, `SELECT fanout.ack($1)`, l2).Scan(&n2); err != nil {
		fail("the new holder's ack: %v", err)
	}
	var left, incons int
	if err := db2.QueryRow(ctx, `SELECT count(*) FROM fanout.read('q', consumer => 'w3')`).Scan(&left); err != nil {
		fail("%v", err)
	}
	if err := db2.QueryRow(ctx, `SELECT count(*) FROM fanout.check_consistency()`).Scan(&incons); err != nil {
		fail("%v", err)
	}
	// Every message of both pages that the new primary has was delivered
	// to the new holder and settled.
	tags := func(m map[int64]string) string {
		c := map[string]int{}
		for _, t := range m {
			c[t]++
		}
		var parts []string
		for _, t := range []string{"replicated", "lost", "after"} {
			if c[t] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", c[t], t))
			}
		}
		return strings.Join(parts, ", ")
	}
	count := func(m map[int64]string, tag string) (n int) {
		for _, t := range m {
			if t == tag {
				n++
			}
		}
		return n
	}
	if count(p2, "replicated") != 3 || count(p2, "after") != 3 || n2 != len(p2) || left != 0 || incons != 0 {
		fail("the new holder's page has %s (want 3 replicated, 3 after), its ack settled %d, %d left over, check_consistency %d rows",
			tags(p2), n2, left, incons)
	}
	fmt.Fprintf(out, "\n== ha async (synchronous_mode off, WAL senders stopped, leader %s SIGKILLed, %s promoted in %s)\n",
		leader.name, newLeader, took.Round(100*time.Millisecond))
	fmt.Fprintf(out, "page before the failover (lease %d): %s; stale ack after it: %s\n", l1, tags(p1), staleCode)
	fmt.Fprintf(out, "page after it (lease %d): %s, acked %d; left over %d; check_consistency %d rows; "+
		"%d messages whose publish returned OK were never replicated (the asynchronous loss window)\n",
		l2, tags(p2), n2, left, incons, count(p1, "lost"))
	return problems
}

// patchConfig changes the cluster's dynamic configuration (PATCH /config).
func (c *patroniCluster) patchConfig(n *patroniNode, body string) error {
	req, err := http.NewRequest(http.MethodPatch, fmt.Sprintf("http://127.0.0.1:%d/config", n.restPort), bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("PATCH /config: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PATCH /config: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
