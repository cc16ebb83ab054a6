package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// closedLoop runs `workers` goroutines that call op back to back for d
// (an op in flight when d ends is finished, not cancelled, and counted).
// op returns how many messages it handled. It returns the total and the
// elapsed time until the last worker stopped.
func closedLoop(ctx context.Context, workers int, d time.Duration,
	op func(ctx context.Context, worker int) (int, error)) (int64, time.Duration, error) {
	var stop atomic.Bool
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for !stop.Load() {
				if ctx.Err() != nil {
					errc <- ctx.Err()
					return
				}
				n, err := op(ctx, w)
				if err != nil {
					stop.Store(true)
					errc <- err
					return
				}
				total.Add(int64(n))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return total.Load(), elapsed, errors.Join(errs...)
}

// variant is one side of an A/B throughput comparison.
type variant struct {
	name string
	op   func(ctx context.Context, worker int) (int, error)
}

// abRounds measures each variant with `workers` clients for d in total,
// split into `rounds` interleaved slices (A B C, B C A, ...) after a warm-up
// of each, so that drift (autovacuum, checkpoints, cache) hits every variant
// alike. It returns messages/s per variant name.
func abRounds(ctx context.Context, env *Env, workers int, d time.Duration, rounds int, vs []variant) (map[string]float64, error) {
	warm := min(d/time.Duration(2*rounds), time.Second)
	for _, v := range vs {
		if _, _, err := closedLoop(ctx, workers, warm, v.op); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", v.name, err)
		}
	}
	msgs := map[string]int64{}
	secs := map[string]float64{}
	for r := 0; r < rounds; r++ {
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			n, el, err := closedLoop(ctx, workers, d/time.Duration(rounds), v.op)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			msgs[v.name] += n
			secs[v.name] += el.Seconds()
		}
	}
	out := map[string]float64{}
	for _, v := range vs {
		out[v.name] = float64(msgs[v.name]) / secs[v.name]
		env.Logf("%-36s %d client(s): %10.0f msg/s", v.name, workers, out[v.name])
	}
	return out, nil
}

// pairedAB is what abPaired measured: each side's throughput over all its
// slices, and the ratio (variant / baseline) of each adjacent pair.
type pairedAB struct {
	Base, Variant float64   // messages/s over all slices
	Ratios        []float64 // per pair, in run order
}

// Median is the median of the per-pair ratios.
func (p pairedAB) Median() float64 {
	s := append([]float64(nil), p.Ratios...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// abPaired measures a baseline and a variant with `workers` clients for d
// each in total, as `pairs` adjacent slices of both (baseline first in even
// pairs, variant first in odd ones) after a warm-up of each. On a shared
// machine the load drifts and comes in bursts: drift hits both halves of a
// pair alike, and a burst that falls into one slice moves that pair's
// ratio, not the median of them (a sum over a few long slices, as in
// abRounds, takes the burst in whole).
func abPaired(ctx context.Context, env *Env, workers int, d time.Duration, pairs int, base, v variant) (pairedAB, error) {
	var out pairedAB
	warm := min(d/time.Duration(2*pairs), time.Second)
	for _, x := range []variant{base, v} {
		if _, _, err := closedLoop(ctx, workers, warm, x.op); err != nil {
			return out, fmt.Errorf("%s warm-up: %w", x.name, err)
		}
	}
	var n [2]int64
	var secs [2]float64
	for r := 0; r < pairs; r++ {
		var rate [2]float64
		for i := 0; i < 2; i++ {
			side := (i + r) % 2
			x := []variant{base, v}[side]
			m, el, err := closedLoop(ctx, workers, d/time.Duration(pairs), x.op)
			if err != nil {
				return out, fmt.Errorf("%s: %w", x.name, err)
			}
			n[side] += m
			secs[side] += el.Seconds()
			rate[side] = float64(m) / el.Seconds()
		}
		out.Ratios = append(out.Ratios, ratio(rate[1], rate[0]))
	}
	out.Base, out.Variant = float64(n[0])/secs[0], float64(n[1])/secs[1]
	env.Logf("%-36s %d client(s): %10.0f msg/s", base.name, workers, out.Base)
	env.Logf("%-36s %d client(s): %10.0f msg/s (median pair ratio %.2f)", v.name, workers, out.Variant, out.Median())
	return out, nil
}

// LatencySummary is the distribution of a set of samples, in milliseconds.
type LatencySummary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

func summarize(samples []time.Duration) LatencySummary {
	if len(samples) == 0 {
		return LatencySummary{} // N == 0: no samples
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return ms(s[i])
	}
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return LatencySummary{N: len(s), Mean: ms(sum / time.Duration(len(s))), P50: pct(0.50), P95: pct(0.95),
		P99: pct(0.99), Max: ms(s[len(s)-1])}
}

func (l LatencySummary) String() string {
	if l.N == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s / p95 %s / p99 %s / max %s ms", fmtMs(l.P50), fmtMs(l.P95), fmtMs(l.P99), fmtMs(l.Max))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// fmtNum formats a number with thousands separators (no decimals at ≥ 100).
func fmtNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if math.Abs(v) < 100 {
		return fmt.Sprintf("%.2f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// pacer calls send(seq) at `rate` per second for d, spread over `workers`
// goroutines (so that one slow call does not delay the schedule). It
// returns how many sends happened and the achieved rate.
func pacer(ctx context.Context, rate float64, d time.Duration, workers int,
	send func(ctx context.Context, seq int) error) (int, float64, error) {
	jobs := make(chan int, workers*4)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	var sent atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				if firstErr.Load() != nil {
					continue
				}
				if err := send(ctx, seq); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := int(rate * d.Seconds())
	for seq := 0; seq < n; seq++ {
		if ctx.Err() != nil || firstErr.Load() != nil {
			break
		}
		if wait := time.Until(start.Add(time.Duration(seq) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	el := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return int(sent.Load()), 0, *p
	}
	return int(sent.Load()), float64(sent.Load()) / el.Seconds(), ctx.Err()
}
