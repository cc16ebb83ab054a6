package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func init() { register(70, matrixScenario{}) }

// matrixScenario: the seed's pre-GA write-amplification matrix LT-1..LT-7,
// scaled to this machine. Each row is a fresh database with one pubsub
// topic (reference mode with 4/8/16/32 groups, offset mode with 16/64/100
// groups), a publisher at a fixed rate (1 message per transaction), and
// every group draining with fanout.read(…, 100) + fanout.ack on 4 shared
// connections (round-robin over the groups). A maintenance tick closes the
// open partition (fanout._manage_partitions with the clock 2 h ahead, as if
// partition_interval had passed) and runs fanout._cleanup_partitions with the
// same clock (retention 1 minute, so a closed partition may go as soon as
// every group is done with it), then fanout.run_maintenance on the real
// clock for the rest.
type matrixScenario struct{}

func (matrixScenario) Name() string { return "matrix" }
func (matrixScenario) Title() string {
	return "7. seed matrix LT-1..LT-7: write amplification at a fixed publish rate (reference 4/8/16/32, offset 16/64/100 groups)"
}

type matrixRow struct {
	id         string
	completion string
	groups     int
}

var matrixRows = []matrixRow{
	{"LT-1", "reference", 4}, {"LT-2", "reference", 8}, {"LT-3", "reference", 16}, {"LT-4", "reference", 32},
	{"LT-5", "offset", 16}, {"LT-6", "offset", 64}, {"LT-7", "offset", 100},
}

const (
	matrixRate    = 200.0
	matrixWorkers = 4
)

type matrixTick struct {
	At        float64 `json:"t_s"`
	Closed    int64   `json:"published_before_rotation"`
	Reclaimed int64   `json:"reclaimed"`
	Retained  int64   `json:"retained"`
	Dropped   int64   `json:"maintenance_work"`
}

func (matrixScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	d := env.Dur(12*time.Second, 4*time.Second)
	tick := env.Dur(2*time.Second, time.Second)
	env.Baseline("matrix: publish rate",
		fmt.Sprintf("production: %g msg/s fixed-rate publish (1 msg/txn, %d publisher connections) for %s per row (%s), "+
			"every group draining with fanout.read(max 100)+fanout.ack on %d shared connections; a maintenance tick every %s "+
			"rotates the partition and runs fanout._cleanup_partitions(now() + 2 h), then fanout.run_maintenance(). Cleanup rate = messages reclaimed "+
			"(published − retained in fanout.topics) per second between the first and the last tick; production rate = "+
			"messages published before each rotation per second over the same ticks",
			matrixRate, matrixWorkers, d, map[bool]string{true: "seed run length scaled down to 4 s per row by -quick",
				false: "seed run length scaled down to 12 s per row so that make bench fits ≈ 12 min on 2 cores"}[env.Quick],
			matrixWorkers, tick))
	var out []Result
	dl0 := ackDeadlocks.Load()
	defer func() {
		if n := ackDeadlocks.Load() - dl0; n > 0 {
			env.Logf("fanout.ack failed with deadlock_detected (40P01) %d time(s) during the matrix (retried)", n)
		}
	}()
	// Summary figures: the worst row of each kind.
	bloatMax, fetchMax, cleanMin := math.Inf(-1), math.Inf(-1), math.Inf(1)
	for _, row := range matrixRows {
		rs, fig, err := runMatrixRow(ctx, env, row, d, tick)
		if err != nil {
			return out, fmt.Errorf("%s: %w", row.id, err)
		}
		out = append(out, rs...)
		bloatMax = max(bloatMax, fig.bloatBytesPct) // NaN (not measured) makes it NaN: null
		if row.fetchJudged() {
			fetchMax = max(fetchMax, fig.fetchP95)
		}
		cleanMin = min(cleanMin, fig.cleanupRatio)
	}
	env.SetSummary(sumBloat, bloatMax)
	env.SetSummary(sumFetchP95, fetchMax)
	env.SetSummary(sumCleanup, cleanMin)
	n := ackDeadlocks.Load() - dl0
	out = append(out, Result{Scenario: "matrix", Case: "fanout.ack deadlocks (40P01), all rows (info)", Unit: "acks",
		Value: float64(n), Ratio: ratio(0, 0), ValueText: fmt.Sprintf("%d (retried)", n),
		Note: "acks lock no message rows (reference mode records completion in m<id>_done, fanout._complete_bits); " +
			"a deadlock here would come from the catalog rows; the harness retries the ack"})
	return out, nil
}

// fetchJudged: the consume-path fetch target (p95 < 10 ms) covers LT-1..3 and
// LT-5 (up to 16 groups).
func (r matrixRow) fetchJudged() bool { return r.groups <= 16 }

// matrixFigures are a row's figures for the summary (NaN: not measured).
type matrixFigures struct {
	bloatBytesPct float64
	fetchP95      float64
	cleanupRatio  float64
}

func runMatrixRow(ctx context.Context, env *Env, row matrixRow, d, tick time.Duration) ([]Result, matrixFigures, error) {
	fig := matrixFigures{math.NaN(), math.NaN(), math.NaN()}
	rs, err := runMatrixRowInner(ctx, env, row, d, tick, &fig)
	return rs, fig, err
}

func runMatrixRowInner(ctx context.Context, env *Env, row matrixRow, d, tick time.Duration, fig *matrixFigures) ([]Result, error) {
	db, err := env.NewDB(ctx, "matrix", 16)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	bytesErr := setupBloatBytes(ctx, db.Pool)
	if bytesErr != nil {
		env.Logf("%s: bloat in bytes not measured: %v", row.id, bytesErr)
	}
	topic := "lt." + row.completion
	if _, err := db.Pool.Exec(ctx, `SELECT fanout.create_topic($1, semantics => 'pubsub', completion => $2,
		retention => '1 minute', partition_interval => '1 minute', zero_subscription_retention => '1 minute')`,
		topic, row.completion); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	groups := make([]string, row.groups)
	for g := range groups {
		groups[g] = fmt.Sprintf("g%03d", g)
		if _, err := db.Pool.Exec(ctx, `SELECT * FROM fanout.subscribe($1, $2, start_position => 'latest',
			heartbeat_timeout => '1 day')`, topic, groups[g]); err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", groups[g], err)
		}
	}
	// Consumers: matrixWorkers connections, each round-robin over its groups.
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, matrixWorkers)
	var delivered, maxPage atomic.Int64
	errc := make(chan error, matrixWorkers+1)
	for w := 0; w < matrixWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for cctx.Err() == nil {
				got := 0
				for g := w; g < len(groups); g += matrixWorkers {
					r, err := readAck(cctx, db.Pool, topic, groups[g], fmt.Sprintf("c%d", w), 100, nil)
					if err != nil {
						if cctx.Err() == nil {
							errc <- err
						}
						return
					}
					lat[w] = append(lat[w], r.Fetch)
					got += r.N
					delivered.Add(int64(r.N))
					if int64(r.N) > maxPage.Load() {
						maxPage.Store(int64(r.N))
					}
				}
				if got == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}(w)
	}
	// Maintenance on its own connection, counting "partition … is busy"
	// notices: a drop that could not get its lock within 200 ms.
	var busy atomic.Int64
	mcfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	mcfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "busy") {
			busy.Add(1)
		}
	}
	mconn, err := pgx.ConnectConfig(ctx, mcfg)
	if err != nil {
		return nil, err
	}
	defer mconn.Close(context.WithoutCancel(ctx))
	wal0, err := walLSN(ctx, db.Pool)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	pub := startPublisher(ctx, db.Pool, topic, matrixRate, matrixWorkers)
	var ticks []matrixTick
	var bloats []bloatSample
	var byteSamples []bloatBytes
	var maintErr error
	// At least 3 ticks (the cleanup rate needs two after the first), also
	// when a loaded machine makes each tick slow, within 5 × d.
	for (time.Since(start) < d || len(ticks) < 3) && time.Since(start) < 5*d && maintErr == nil {
		select {
		case <-ctx.Done():
			maintErr = ctx.Err()
			continue
		case err := <-errc:
			maintErr = err
			continue
		case <-time.After(tick):
		}
		b, err := sampleBloat(ctx, db.Pool, topic)
		if err != nil {
			maintErr = err
			break
		}
		bloats = append(bloats, b)
		if bytesErr == nil {
			bb, err := sampleBloatBytes(ctx, db.Pool)
			if err != nil {
				maintErr = err
				break
			}
			byteSamples = append(byteSamples, bb)
		}
		closed := pub.Count.Load()
		if err := rotate(ctx, db.Pool); err != nil {
			maintErr = err
			break
		}
		// Partition retention on the clock 2 h ahead (the row compresses
		// rotation and retention into 12 s); everything else on the real
		// clock. With the whole round 2 h ahead, _cleanup_bookkeeping took
		// every lease slot closed at the tick for one idle for an hour and
		// deleted it, so the groups' next reads inserted new slots: a churn
		// of the lease table that a reading group never sees (its slots
		// are reused page after page), and most of the catalog's measured
		// bloat.
		var work, part int64
		for i := 0; i < 100; i++ {
			var n int64
			if err := mconn.QueryRow(ctx, `SELECT fanout._cleanup_partitions(p_now => now() + interval '2 hours')`).Scan(&n); err != nil {
				maintErr = fmt.Errorf("cleanup partitions: %w", err)
				break
			}
			if part += n; n == 0 {
				break
			}
		}
		if maintErr != nil {
			break
		}
		if err := mconn.QueryRow(ctx, `SELECT fanout.run_maintenance()`).Scan(&work); err != nil {
			maintErr = fmt.Errorf("run_maintenance: %w", err)
			break
		}
		work += part
		now := pub.Count.Load()
		retained, _, err := topicSize(ctx, db.Pool, topic)
		if err != nil {
			maintErr = err
			break
		}
		ticks = append(ticks, matrixTick{At: time.Since(start).Seconds(), Closed: closed, Reclaimed: now - retained,
			Retained: retained, Dropped: work})
	}
	perr := pub.Stop()
	elapsed := time.Since(start)
	wal1, err := walLSN(ctx, db.Pool)
	if err != nil {
		return nil, err
	}
	stopConsumers()
	wg.Wait()
	if maintErr != nil {
		return nil, maintErr
	}
	if perr != nil {
		return nil, fmt.Errorf("publish: %w", perr)
	}
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	fetch := summarize(all)
	published := pub.Count.Load()
	walPerMsg := float64(wal1-wal0) / float64(max(published, 1))
	if len(ticks) < 3 || len(bloats) == 0 {
		return nil, fmt.Errorf("only %d maintenance ticks in %s", len(ticks), d)
	}
	first, last := ticks[0], ticks[len(ticks)-1]
	span := last.At - first.At
	cleanRate := float64(last.Reclaimed-first.Reclaimed) / span
	prodRate := float64(last.Closed-first.Closed) / span
	// Keeping up: everything closed one tick earlier has been reclaimed.
	keepsUp := last.Reclaimed >= ticks[len(ticks)-2].Closed
	// Bloat swings with autovacuum (a vacuum of fanout.lease takes it from
	// ~80 % to ~0): judge the mean over the ticks, show the max.
	bl := bloats[len(bloats)-1]
	maxBloat, meanBloat, meanMsg := 0.0, 0.0, 0.0
	for _, b := range bloats {
		maxBloat = max(maxBloat, b.Pct)
		meanBloat += b.Pct / float64(len(bloats))
		if b.MsgDead+b.MsgLive > 0 {
			meanMsg += 100 * float64(b.MsgDead) / float64(b.MsgDead+b.MsgLive) / float64(len(bloats))
		}
	}
	env.Logf("%s %s %3d groups: published %d (%.0f/s), delivered %d, fetch %s, bloat %.1f%% (max %.1f%%), "+
		"mean %.1f%%, WAL %.0f B/msg, cleanup %.0f/s vs production %.0f/s, retained at end %d, partition drops that timed out on their lock %d, "+
		"ack deadlocks retried so far %d; dead/live msg %d/%d lease %d/%d consumer_group %d/%d",
		row.id, row.completion, row.groups, published, float64(published)/elapsed.Seconds(), delivered.Load(), fetch,
		bl.Pct, maxBloat, meanBloat, walPerMsg, cleanRate, prodRate, last.Retained, busy.Load(), ackDeadlocks.Load(),
		bl.MsgDead, bl.MsgLive, bl.LeaseDead, bl.LeaseLive, bl.GroupDead, bl.GroupLive)

	label := fmt.Sprintf("%s %s, %d groups", row.id, row.completion, row.groups)
	details := map[string]any{"groups": row.groups, "completion": row.completion, "rate": matrixRate,
		"seconds": elapsed.Seconds(), "published": published, "delivered": delivered.Load(),
		"max_page": maxPage.Load(), "fetch": fetch, "bloat_last": bl, "bloat_max_pct": maxBloat, "bloat_mean_pct": meanBloat, "message_tables_bloat_mean_pct": meanMsg,
		"wal_bytes": wal1 - wal0, "ticks": ticks, "drops_lock_timeout": busy.Load()}
	fetchRow := Result{Scenario: "matrix", Case: label + ": fetch", Unit: "ms", Value: fetch.P95, Ratio: ratio(0, 0),
		ValueText: fmt.Sprintf("p50 %s / p95 %s / p99 %s ms", fmtMs(fetch.P50), fmtMs(fetch.P95), fmtMs(fetch.P99)),
		Details:   details}
	if row.fetchJudged() {
		fetchRow.Target, fetchRow.Pass = "fetch p95 < 10 ms", boolp(fetch.N > 0 && fetch.P95 < 10)
	} else {
		fetchRow.Note = "the consume-path fetch target (p95 < 10 ms) covers up to 16 groups (LT-1..3, LT-5)"
	}
	// Bloat in bytes (judged): mean over the samples under load, the first
	// (warm-up: the tables start empty) left out when there are others.
	steady := byteSamples
	if len(steady) > 1 {
		steady = steady[1:]
	}
	bytesMean, bytesMax, bytesMsg, bytesCat := math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if len(steady) > 0 {
		bytesMean, bytesMax, bytesMsg, bytesCat = 0, 0, 0, 0
		for _, b := range steady {
			k := float64(len(steady))
			bytesMean += b.Pct / k
			bytesMsg += b.MsgPct / k
			bytesCat += b.CatalogPct / k
			bytesMax = max(bytesMax, b.Pct)
		}
		details["bloat_bytes_mean_pct"] = bytesMean
		details["bloat_bytes_max_pct"] = bytesMax
		details["bloat_bytes_message_tables_mean_pct"] = bytesMsg
		details["bloat_bytes_catalog_mean_pct"] = bytesCat
		details["bloat_bytes_last"] = byteSamples[len(byteSamples)-1]
	}
	fig.bloatBytesPct = bytesMean
	env.Logf("%s bloat in bytes: mean %.1f%% (max %.1f%%), message tables %.1f%%, catalog %.1f%% over %d samples",
		row.id, bytesMean, bytesMax, bytesMsg, bytesCat, len(steady))
	bloatRow := Result{Scenario: "matrix", Case: label + ": bloat (bytes)", Unit: "%", Value: bytesMean, Ratio: ratio(0, 0),
		Target: "bloat < 20 %",
		Note: "bloat = (dead tuple bytes + free space) / table bytes (pgstattuple) summed over the topic's partitions and " +
			"every table of the fanout catalog, sampled at every maintenance tick under load (the first sample, from " +
			"empty tables, left out): mean over the samples (judged), max, and the message tables and the catalog " +
			"alone; then the seed's tuple measure, n_dead_tup / (n_live_tup + n_dead_tup) over the partitions, " +
			"fanout.lease and fanout.consumer_group (pg_stat_user_tables), mean over the ticks. The maintenance clock " +
			"runs 2 h ahead for rotation and partition retention only (with the whole maintenance round ahead, fanout._cleanup_bookkeeping deleted every lease slot closed at the tick and the next reads inserted new ones)"}
	tuples := fmt.Sprintf("tuples %.1f %%", meanBloat)
	if math.IsNaN(bytesMean) {
		bloatRow.Value = 0 // JSON has no NaN
		bloatRow.ValueText = "not measured (pgstattuple unavailable); " + tuples
	} else {
		bloatRow.ValueText = fmt.Sprintf("%.1f %% (max %.1f %%; message tables %.1f %%, catalog %.1f %%); %s",
			bytesMean, bytesMax, bytesMsg, bytesCat, tuples)
		bloatRow.Pass = boolp(bytesMean < 20)
	}
	walRow := Result{Scenario: "matrix", Case: label + ": WAL per message", Unit: "B/msg", Value: walPerMsg, Ratio: ratio(0, 0),
		Note: "WAL = pg_current_wal_lsn() difference over the whole row (publish, reads, acks, maintenance) / messages published; " +
			"the WAL position is server-wide, so anything else writing on the server at the same time counts too"}
	cleanRow := throughputRow("matrix", label+": cleanup vs production", "msg/s", cleanRate, prodRate, "matrix: publish rate", 0)
	fig.cleanupRatio = cleanRow.Ratio
	if fetch.N > 0 {
		fig.fetchP95 = fetch.P95
	}
	cleanRow.Target = "cleanup ≥ production"
	cleanRow.MinRatio = 1
	cleanRow.Pass = boolp(keepsUp && cleanRate >= 0.95*prodRate)
	if busy.Load() > 0 {
		cleanRow.ValueText = fmt.Sprintf("%s msg/s (%d drops hit lock_timeout)", fmtNum(cleanRate), busy.Load())
	}
	cleanRow.Note = "met when everything published before the previous rotation has been reclaimed at the last tick " +
		"and the cleanup rate is within 5 % (tick granularity) of the production rate"
	return []Result{fetchRow, bloatRow, walRow, cleanRow}, nil
}
