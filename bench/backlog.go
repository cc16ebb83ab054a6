package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func init() { register(90, backlogScenario{}) }

// backlogScenario: a backlog published while no consumer runs (publish_batch
// of 1000 from 2 clients), then drained by one consumer in pages of 100
// (fanout.read(…, 100) + fanout.ack): no page over max_messages, drain rate,
// the slowest read, and the consumer process's memory (this Go process:
// Go heap sampled at 10 Hz during the drain, and VmRSS / VmHWM).
type backlogScenario struct{}

func (backlogScenario) Name() string { return "backlog" }
func (backlogScenario) Title() string {
	return "9. backlog drain: messages published while the consumer is down, then drained in pages of 100"
}

// procStatusKB reads a "VmHWM:  123 kB"-style line of /proc/self/status (0 if unknown).
func procStatusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func (backlogScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	n := env.N(1_000_000, 100_000)
	drainCap := env.Dur(100*time.Second, 60*time.Second)
	db, err := env.NewDB(ctx, "backlog", 8)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	const topic = "backlog"
	fillRate, err := fillTopic(ctx, db, topic, "", n)
	if err != nil {
		return nil, err
	}
	env.Logf("published %s messages with publish_batch(1000) x 2 clients at %.0f msg/s", fmtNum(float64(n)), fillRate)
	env.Baseline("backlog: fill", fmt.Sprintf("%s messages (%s) published with publish_batch of 1000 from 2 clients "+
		"while no consumer runs; drained by one consumer, pages of 100, drain capped at %s",
		fmtNum(float64(n)), map[bool]string{true: "scaled down from 1,000,000 by -quick", false: "full size"}[env.Quick], drainCap))

	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	rss0 := procStatusKB("VmRSS")
	var peakHeap atomic.Uint64
	peakHeap.Store(ms0.HeapInuse)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peakHeap.Load() {
				peakHeap.Store(m.HeapInuse)
			}
		}
	}()
	var got, pages, empty int64
	maxPage := 0
	var lats []time.Duration
	var maxLat time.Duration
	start := time.Now()
	capped := false
	for got < int64(n) {
		if time.Since(start) > drainCap {
			capped = true
			break
		}
		r, err := readAck(ctx, db.Pool, topic, "", "drainer", 100, nil)
		if err != nil {
			close(done)
			return nil, err
		}
		pages++
		if r.N == 0 {
			empty++
			if empty > 100 {
				close(done)
				return nil, fmt.Errorf("backlog: %d of %d delivered, then 100 empty reads", got, n)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		got += int64(r.N)
		maxPage = max(maxPage, r.N)
		lats = append(lats, r.Fetch)
		maxLat = max(maxLat, r.Fetch)
	}
	el := time.Since(start)
	close(done)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	rss1, hwm := procStatusKB("VmRSS"), procStatusKB("VmHWM")
	rate := float64(got) / el.Seconds()
	lat := summarize(lats)
	heapGrowth := int64(peakHeap.Load()) - int64(ms0.HeapInuse)
	env.Logf("drained %s of %s in %.1f s: %.0f msg/s, %d pages (%d empty), largest page %d, read %s; "+
		"Go heap in use %s before, peak %s during (+%s); VmRSS %s → %s, VmHWM %s (process lifetime)",
		fmtNum(float64(got)), fmtNum(float64(n)), el.Seconds(), rate, pages, empty, maxPage, lat,
		fmtBytes(int64(ms0.HeapInuse)), fmtBytes(int64(peakHeap.Load())), fmtBytes(heapGrowth),
		fmtBytes(rss0*1024), fmtBytes(rss1*1024), fmtBytes(hwm*1024))
	scaling := ""
	if capped {
		scaling = fmt.Sprintf(" (drain capped at %s: %s of %s)", drainCap, fmtNum(float64(got)), fmtNum(float64(n)))
	}
	details := map[string]any{"messages": n, "drained": got, "seconds": el.Seconds(), "pages": pages,
		"empty_pages": empty, "max_page": maxPage, "read": lat, "fill_rate": fillRate,
		"heap_inuse_before": ms0.HeapInuse, "heap_inuse_peak": peakHeap.Load(), "vm_rss_kb_before": rss0,
		"vm_rss_kb_after": rss1, "vm_hwm_kb": hwm, "capped": capped}
	label := fmt.Sprintf("backlog %s msgs, 1 consumer, pages of 100", fmtNum(float64(n)))
	return []Result{
		{Scenario: "backlog", Case: label + ": drain rate" + scaling, Unit: "msg/s", Value: rate, Ratio: ratio(0, 0),
			HigherIsBetter: true, Details: details},
		{Scenario: "backlog", Case: label + ": largest page", Unit: "msgs", Value: float64(maxPage), Ratio: ratio(0, 0),
			ValueText: fmt.Sprintf("%d msgs", maxPage), Target: "≤ 100 (max_messages)", Pass: boolp(maxPage <= 100 && maxPage > 0)},
		{Scenario: "backlog", Case: label + ": read latency", Unit: "ms", Value: lat.Max, Ratio: ratio(0, 0),
			ValueText: fmt.Sprintf("p50 %s / p99 %s / max %s ms", fmtMs(lat.P50), fmtMs(lat.P99), fmtMs(lat.Max))},
		{Scenario: "backlog", Case: label + ": consumer memory", Unit: "B", Value: float64(heapGrowth), Ratio: ratio(0, 0),
			ValueText: fmt.Sprintf("Go heap peak +%s; VmRSS %s → %s", fmtBytes(heapGrowth), fmtBytes(rss0*1024), fmtBytes(rss1*1024)),
			Note: "the consumer is the bench process: Go heap in use sampled at 10 Hz during the drain (growth over the " +
				"value before it), and the process's resident set before and after (VmHWM, the lifetime peak, in results.json)"},
	}, nil
}
