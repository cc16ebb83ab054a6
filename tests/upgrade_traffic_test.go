package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/internal/release"
	"github.com/pgfanout/pgq/internal/testdb"
)

// upgradeFrom picks the release the traffic test upgrades from and returns
// the checkout of that release and of the tree it upgrades to, each a
// directory with the whole source: PGQ_UPGRADE_FROM (a tag or commit of this
// repository: make upgrade-test FROM=vX.Y.Z), else the newest release in
// RELEASES, else a synthetic one: this tree cut as 0.0.1 by
// scripts/release.sh in a temp clone, upgraded to the same tree with a
// changed generator (the page functions get one more setting) by the
// migration scripts/gen-upgrade.sh writes.
func upgradeFrom(t *testing.T, admin string) (from, oldDir, newDir string, generatorChanged bool) {
	t.Helper()
	root := repoRoot(t)
	rev := os.Getenv("PGQ_UPGRADE_FROM")
	if rev == "" {
		rels, err := release.ReadReleases(root)
		require.NoError(t, err)
		if len(rels) > 0 {
			rev = rels[len(rels)-1].Commit
		}
	}
	if rev != "" {
		commit := strings.TrimSpace(git(t, root, "rev-parse", rev+"^{commit}"))
		dir, err := release.Extract(root, commit, t.TempDir())
		require.NoError(t, err)
		return rev, dir, root, false
	}
	dir := synthClone(t, func(dir string) {
		b, err := os.ReadFile(filepath.Join(dir, "RELEASES"))
		require.NoError(t, err)
		require.NotRegexp(t, `(?m)^\d+\.\d+\.\d+\s`, string(b), "no release recorded, else it is used")
	})
	script(t, dir, admin, "scripts/release.sh", "0.0.1")
	replaceIn(t, filepath.Join(dir, "sql/functions/fanout._create_page_function.sql"),
		"        SET enable_bitmapscan = off\n", "        SET enable_bitmapscan = off\n        SET work_mem = '8MB'\n")
	script(t, dir, admin, "scripts/gen-upgrade.sh")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "next: a generator change")
	old, err := release.Extract(dir, strings.TrimSpace(git(t, dir, "rev-parse", "v0.0.1^{commit}")), t.TempDir())
	require.NoError(t, err)
	return "synthetic 0.0.1", old, dir, true
}

func goBuild(t *testing.T, dir, pkg, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	o, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s in %s: %s", pkg, dir, o)
}

// oldClientProgram is built from the old release's client package: it
// publishes n messages to a queue topic with client.Publisher and consumes
// them with client.Consumer, against the upgraded database.
const oldClientProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfanout/pgq/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		os.Exit(1)
	}
	defer pool.Close()
	const n = 20
	pub := client.NewPublisher(pool)
	want := map[int64]bool{}
	for i := 0; i < n; i++ {
		id, err := pub.Publish(ctx, "u_client", client.Message{Payload: []byte(fmt.Sprintf("{\"i\": %d}", i))})
		if err != nil {
			fmt.Println("publish:", err)
			os.Exit(1)
		}
		want[id] = true
	}
	var mu sync.Mutex
	runCtx, stop := context.WithCancel(ctx)
	c, err := client.NewConsumer(pool, client.Config{Topic: "u_client", Consumer: "old-client", PollInterval: 50 * time.Millisecond},
		func(ctx context.Context, d *client.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			delete(want, d.ID)
			if len(want) == 0 {
				stop()
			}
			return nil
		})
	if err != nil {
		fmt.Println("consumer:", err)
		os.Exit(1)
	}
	if err := c.Run(runCtx); err != nil && runCtx.Err() == nil {
		fmt.Println("run:", err)
		os.Exit(1)
	}
	if len(want) != 0 || ctx.Err() != nil {
		fmt.Println("not delivered:", len(want))
		os.Exit(1)
	}
	fmt.Println("old client: published and consumed", n)
}
`

// upgradeTopicsSQL: every kind of topic, created by the old release, with
// backlogs, delayed, prioritized and deduped messages, a dead letter and a
// late reference-mode group (a backfill job).
const upgradeTopicsSQL = `
SELECT fanout.create_topic('u_queue');
SELECT fanout.create_topic('u_pubsub', semantics => 'pubsub');
SELECT fanout.create_topic('u_ref', semantics => 'pubsub', completion => 'reference');
SELECT fanout.create_topic('u_part', partitions => 4);
SELECT fanout.create_topic('u_seq', sequence_ordering => true);
SELECT fanout.create_topic('u_dead', max_attempts => 1);
SELECT fanout.create_topic('u_client');
SELECT fanout.subscribe('u_pubsub', 'g1');
SELECT fanout.subscribe('u_pubsub', 'g2');
SELECT fanout.subscribe('u_ref', 'g1');
SELECT fanout.publish(t, jsonb_build_object('backlog', g), message_group => 'b' || (g % 5))
  FROM generate_series(1, 200) g, unnest(ARRAY['u_queue', 'u_pubsub', 'u_ref', 'u_part']) t;
SELECT fanout.publish('u_seq', jsonb_build_object('backlog', g), message_group => 'b', sequence => g)
  FROM generate_series(1, 50) g;
SELECT fanout.publish('u_queue', '{"delayed": 1}', delay => '2 seconds');
SELECT fanout.publish('u_queue', '{"prio": 1}', priority => 5);
SELECT fanout.publish('u_queue', '{"dedupe": 1}', dedupe_key => 'dk1');
SELECT fanout.publish('u_dead', '{"dead": 1}');
SELECT * FROM fanout.subscribe('u_ref', 'g_late', start_position => 'earliest');
`

type delivery struct {
	id, n int64
	key   string
	first bool
}

type groupLog struct {
	mu          sync.Mutex
	deliveries  []delivery
	seen, acked map[int64]bool
	badDup      int
}

// TestUpgradeWithTraffic upgrades a database of the previous release (see
// upgradeFrom; installed by that release's own binary) with the new
// binary's migrate while producers and consumers run, runs migrate again
// (a no-op), then drains and verifies: every committed message reached
// every group (0 lost), no message came again after its ack (0 bad
// duplicates), per-key order on the partitioned topic and per-aggregate
// sequence order held, a lease taken before the upgrade is redelivered
// after it expires, the dedupe key kept its message, the dead letter is
// still there, check_consistency() is clean, the old release's client
// library publishes and consumes against the new SQL, and a topic created
// at the old version runs the new generator's code. Figures (messages,
// groups, the migration's duration, p99 publish latency during it) go to
// the log.
func TestUpgradeWithTraffic(t *testing.T) {
	t.Parallel()
	admin := testdb.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	from, oldDir, newDir, generatorChanged := upgradeFrom(t, admin)
	bin := t.TempDir()
	oldBin, newBin := filepath.Join(bin, "pgq-scheduler-old"), filepath.Join(bin, "pgq-scheduler-new")
	goBuild(t, oldDir, "./cmd/pgq-scheduler", oldBin)
	goBuild(t, newDir, "./cmd/pgq-scheduler", newBin)
	require.NoError(t, os.MkdirAll(filepath.Join(oldDir, "cmd", "pgq-oldclient"), 0o755))
	writeFile(t, filepath.Join(oldDir, "cmd", "pgq-oldclient", "main.go"), oldClientProgram)
	oldClient := filepath.Join(bin, "pgq-oldclient")
	goBuild(t, oldDir, "./cmd/pgq-oldclient", oldClient)

	db, drop, err := release.TempDB(ctx, admin, "pgq_t_upgrade")
	require.NoError(t, err)
	t.Cleanup(drop)
	out := runCmd(t, oldBin, "migrate", "--database-url", db)
	oldVersion := regexp.MustCompile(`schema at version (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, oldVersion, out)
	require.NoError(t, release.Exec(ctx, db, upgradeTopicsSQL))

	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	q := func(sql string, args ...any) int64 {
		var v int64
		require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&v), sql)
		return v
	}
	// In flight across the upgrade: a page leased for 3 s, never acked; a
	// nacked page waiting as retries; a dead letter.
	inflight, err := readMsgs(ctx, conn, "u_pubsub", ptr("g2"), "held", 10, "3 seconds")
	require.NoError(t, err)
	require.Len(t, inflight, 10)
	nacked, err := readMsgs(ctx, conn, "u_pubsub", ptr("g1"), "nacker", 5, "1 minute")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT fanout.nack($1, $2, '0 seconds')", nacked[0].LeaseID, ids(nacked))
	require.NoError(t, err)
	dead, err := readMsgs(ctx, conn, "u_dead", nil, "c", 1, "1 minute")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT fanout.nack($1, $2, '0 seconds')", dead[0].LeaseID, ids(dead))
	require.NoError(t, err)
	// A lease id of the old release (a page's internal id): acked after
	// the upgrade while it is its slot's current page (fanout._lease_raw).
	_, err = conn.Exec(ctx, `SELECT fanout.create_topic('u_legacy'), fanout.publish('u_legacy', '{}'), fanout.publish('u_legacy', '{}')`)
	require.NoError(t, err)
	legacy, err := readMsgs(ctx, conn, "u_legacy", nil, "c", 1, "1 hour")
	require.NoError(t, err)
	require.Len(t, legacy, 1)
	deadBefore := q(`SELECT count(*) FROM fanout.dead_letters WHERE topic = 'u_dead'`)
	require.EqualValues(t, 1, deadBefore)
	dedupeID := q(`SELECT fanout.publish('u_queue', '{"dedupe": 2}', dedupe_key => 'dk1')`)
	pageConfig := func() string {
		var s string
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(array_to_string(p.proconfig, ','), '') FROM pg_proc p
			JOIN fanout.topic t ON p.proname = t.data_table || '_page'
			WHERE t.topic = 'u_part' AND p.pronamespace = 'fanout_data'::regnamespace`).Scan(&s))
		return s
	}
	if generatorChanged {
		require.NotContains(t, pageConfig(), "work_mem")
	}

	// Traffic: producers (one per key and aggregate, so each key's order is
	// its producer's) and one consumer per group.
	type pubLat struct {
		at  time.Time
		dur time.Duration
	}
	var (
		published   atomic.Int64
		latMu       sync.Mutex
		latencies   []pubLat
		stopProduce = make(chan struct{})
		prodWG      sync.WaitGroup
		prodErr     = make(chan error, 8)
	)
	const producers = 3
	for p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			c, err := pgx.Connect(ctx, db)
			if err != nil {
				prodErr <- err
				return
			}
			defer c.Close(context.Background())
			for n := int64(1); ; n++ {
				select {
				case <-stopProduce:
					return
				default:
				}
				start := time.Now()
				_, err := c.Exec(ctx, `SELECT fanout.publish('u_queue', $1::jsonb),
					fanout.publish('u_pubsub', $1::jsonb),
					fanout.publish('u_ref', $1::jsonb),
					fanout.publish('u_part', $1::jsonb, message_group => $2),
					fanout.publish('u_seq', $1::jsonb, message_group => $2, sequence => $3)`,
					fmt.Sprintf(`{"n": %d}`, n), fmt.Sprintf("k%d", p), n)
				if err != nil {
					prodErr <- fmt.Errorf("producer %d: %w", p, err)
					return
				}
				latMu.Lock()
				latencies = append(latencies, pubLat{start, time.Since(start)})
				latMu.Unlock()
				published.Add(5)
			}
		}()
	}
	groups := []struct{ topic, group string }{
		{"u_queue", ""}, {"u_pubsub", "g1"}, {"u_pubsub", "g2"}, {"u_ref", "g1"}, {"u_ref", "g_late"},
		{"u_part", ""}, {"u_seq", ""},
	}
	logs := map[string]*groupLog{}
	consCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consWG sync.WaitGroup
	consErr := make(chan error, len(groups))
	for _, g := range groups {
		gl := &groupLog{seen: map[int64]bool{}, acked: map[int64]bool{}}
		logs[g.topic+"/"+g.group] = gl
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			c, err := pgx.Connect(ctx, db)
			if err != nil {
				consErr <- err
				return
			}
			defer c.Close(context.Background())
			var group *string
			if g.group != "" {
				group = &g.group
			}
			for consCtx.Err() == nil {
				rows, err := c.Query(consCtx, `SELECT lease_id, message_id, coalesce(message_group, ''), coalesce((payload->>'n')::bigint, 0)
					FROM fanout.read($1, $2, 'member', 20, '10 seconds')`, g.topic, group)
				if err != nil {
					if consCtx.Err() == nil {
						consErr <- fmt.Errorf("%s/%s: read: %w", g.topic, g.group, err)
					}
					return
				}
				var lease int64
				var page []int64
				gl.mu.Lock()
				for rows.Next() {
					var d delivery
					if err := rows.Scan(&lease, &d.id, &d.key, &d.n); err != nil {
						gl.mu.Unlock()
						consErr <- err
						return
					}
					if gl.acked[d.id] {
						gl.badDup++
					}
					d.first = !gl.seen[d.id]
					gl.seen[d.id] = true
					gl.deliveries = append(gl.deliveries, d)
					page = append(page, d.id)
				}
				gl.mu.Unlock()
				if err := rows.Err(); err != nil {
					if consCtx.Err() == nil {
						consErr <- fmt.Errorf("%s/%s: read: %w", g.topic, g.group, err)
					}
					return
				}
				if len(page) == 0 {
					continue
				}
				var n int
				if err := c.QueryRow(consCtx, "SELECT fanout.ack($1, $2)", lease, page).Scan(&n); err != nil {
					if consCtx.Err() == nil {
						consErr <- fmt.Errorf("%s/%s: ack: %w", g.topic, g.group, err)
					}
					return
				}
				if n == len(page) {
					gl.mu.Lock()
					for _, id := range page {
						gl.acked[id] = true
					}
					gl.mu.Unlock()
				}
			}
		}()
	}
	// Maintenance (the backfill of g_late, rotation, expiry) as pg_cron
	// would run it, before, during and after the upgrade.
	consWG.Add(1)
	go func() {
		defer consWG.Done()
		c, err := pgx.Connect(ctx, db)
		if err != nil {
			consErr <- err
			return
		}
		defer c.Close(context.Background())
		for consCtx.Err() == nil {
			_, err := c.Exec(consCtx, "SELECT fanout.run_maintenance()")
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				// Maintenance waits for locks a bounded time (lock_timeout);
				// the migration holds the catalog's tables for a moment. The
				// sidecar counts such a round as a job error and runs the
				// next one; so does this loop.
				err = nil
			}
			if err != nil && consCtx.Err() == nil {
				consErr <- fmt.Errorf("maintenance: %w", err)
				return
			}
			select {
			case <-consCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	waitPublished := func(n int64) {
		for published.Load() < n {
			select {
			case err := <-prodErr:
				t.Fatal(err)
			case err := <-consErr:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal("traffic stalled")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitPublished(300)

	// The upgrade, with traffic running, and again.
	migStart := time.Now()
	out = runCmd(t, newBin, "migrate", "--database-url", db)
	migEnd := time.Now()
	newVersion := regexp.MustCompile(`schema at version (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, newVersion, out)
	again := runCmd(t, newBin, "migrate", "--database-url", db)
	require.Equal(t, out, again, "a second migrate is a no-op")
	atMigration := published.Load()
	waitPublished(atMigration + 300)
	close(stopProduce)
	prodWG.Wait()
	select {
	case err := <-prodErr:
		t.Fatal(err)
	default:
	}

	// The old release's client against the new SQL.
	cmd := exec.Command(oldClient)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db)
	o, err := cmd.CombinedOutput()
	require.NoError(t, err, "old client: %s", o)

	// Drain: every group reads every message of its topic (the delayed one
	// and the page leased before the upgrade included).
	want := map[string][]int64{}
	for _, g := range groups {
		var table string
		require.NoError(t, conn.QueryRow(ctx, `SELECT data_table FROM fanout.topic WHERE topic = $1`, g.topic).Scan(&table))
		rows, err := conn.Query(ctx, "SELECT id FROM fanout_data."+pgx.Identifier{table}.Sanitize())
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		want[g.topic+"/"+g.group] = all
	}
	drainCtx, drainCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer drainCancel()
	for {
		missing := 0
		for k, all := range want {
			gl := logs[k]
			gl.mu.Lock()
			for _, id := range all {
				if !gl.acked[id] {
					missing++
				}
			}
			gl.mu.Unlock()
		}
		if missing == 0 {
			break
		}
		select {
		case err := <-consErr:
			t.Fatal(err)
		case <-drainCtx.Done():
			t.Fatalf("drain: %d messages not delivered and acked within 3 minutes", missing)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopConsumers()
	consWG.Wait()

	total := 0
	for k, gl := range logs {
		require.Zero(t, gl.badDup, "%s: messages delivered again after their ack", k)
		total += len(want[k])
		// Per-key order (partitioned) and per-aggregate order (sequence):
		// first deliveries of each key come in the producer's order.
		if strings.HasPrefix(k, "u_part/") || strings.HasPrefix(k, "u_seq/") {
			last := map[string]int64{}
			for _, d := range gl.deliveries {
				if !d.first || d.n == 0 {
					continue
				}
				require.Greater(t, d.n, last[d.key], "%s: key %s out of order", k, d.key)
				last[d.key] = d.n
			}
			require.Len(t, last, producers, "%s: every producer's key", k)
		}
	}
	require.EqualValues(t, 1, q(`SELECT fanout.ack($1)`, legacy[0].LeaseID), "a lease read before the upgrade is acked after it")
	require.EqualValues(t, 0, q(`SELECT fanout.ack($1)`, legacy[0].LeaseID), "acked")
	next, err := readMsgs(ctx, conn, "u_legacy", nil, "c", 1, "1 hour")
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.NotEqual(t, legacy[0].LeaseID+1, next[0].LeaseID, "the slot's next page has an opaque id")
	require.EqualValues(t, 1, q(`SELECT fanout.ack($1)`, next[0].LeaseID))
	_, err = conn.Exec(ctx, `SELECT fanout.ack($1)`, legacy[0].LeaseID)
	requireSQLState(t, err, "PGQ10") // no longer its slot's current page: the old form is unknown
	inflightIDs := ids(inflight)
	logs["u_pubsub/g2"].mu.Lock()
	for _, id := range inflightIDs {
		require.True(t, logs["u_pubsub/g2"].acked[id], "a page leased before the upgrade is delivered after it")
	}
	logs["u_pubsub/g2"].mu.Unlock()
	require.Equal(t, dedupeID, q(`SELECT fanout.publish('u_queue', '{"dedupe": 3}', dedupe_key => 'dk1')`),
		"a dedupe key claimed before the upgrade holds after it")
	require.Equal(t, deadBefore, q(`SELECT count(*) FROM fanout.dead_letters WHERE topic = 'u_dead'`))
	require.Empty(t, queryStrings(t, ctx, db, `SELECT coalesce(topic, '') || ': ' || problem FROM fanout.check_consistency()`))
	if generatorChanged {
		require.Contains(t, pageConfig(), "work_mem=8MB", "a topic created at the old version runs the new generator's code")
	}

	// Figures.
	latMu.Lock()
	var during, all []time.Duration
	for _, l := range latencies {
		all = append(all, l.dur)
		if l.at.Add(l.dur).After(migStart) && l.at.Before(migEnd) {
			during = append(during, l.dur)
		}
	}
	latMu.Unlock()
	p99 := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[(len(ds)*99)/100]
	}
	t.Logf("upgrade from %s (schema version %s) to %s (version %s) with traffic: %d messages published during the run "+
		"(+%d backlog), %d groups on %d topics, %d deliveries verified; migrate took %s (its transaction held its locks "+
		"at most that long); publish round trip of 5 publishes: p99 %s during the migration (%d samples), p99 %s overall; %s",
		from, oldVersion[1], newDir, newVersion[1], published.Load(), 200*4+50+4, len(groups), 5, total,
		migEnd.Sub(migStart).Round(time.Millisecond), p99(during), len(during), p99(all), strings.TrimSpace(string(o)))
}
