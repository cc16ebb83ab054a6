package chaos

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Summary is the outcome of Run: the five numbers of the last line, plus
// anything else that failed.
type Summary struct {
	Lost, BadDuplicates, RolledBackDelivered int
	// OutOfOrder and Early: deliveries against a key's or an aggregate's
	// order, and before their deliver_at or their predecessor's ack.
	OutOfOrder, Early int
	// Problems are failures outside the five counts (a scenario that could
	// not run, a consistency check with rows, an accounting that does not add
	// up); any makes the run fail.
	Problems []string
}

// OK reports whether the run found nothing wrong.
func (s Summary) OK() bool {
	return s.Lost == 0 && s.BadDuplicates == 0 && s.RolledBackDelivered == 0 && s.OutOfOrder == 0 && s.Early == 0 &&
		len(s.Problems) == 0
}

// Line is the run's last line.
func (s Summary) Line() string {
	return fmt.Sprintf("chaos: %d lost, %d bad duplicates, %d rolled-back delivered, %d out of order, %d early", s.Lost,
		s.BadDuplicates, s.RolledBackDelivered, s.OutOfOrder, s.Early)
}

func (s *Summary) add(v *verdict) {
	if v == nil {
		return
	}
	l, b, r := v.totals()
	s.Lost += l
	s.BadDuplicates += b
	s.RolledBackDelivered += r
	o, e := v.ordering()
	s.OutOfOrder += o
	s.Early += e
	if len(v.Consistency) > 0 {
		s.Problems = append(s.Problems, fmt.Sprintf("fanout.check_consistency() returned %d rows", len(v.Consistency)))
	}
}

// Run runs the configured scenarios, writing their reports to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	var sum Summary
	cfg, err := cfg.withDefaults()
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "chaos: records and logs in %s\n", cfg.RunDir)
	// The failover scenarios stop their clusters themselves.
	defer func() { _ = (&cluster{root: cfg.Root, name: cfg.Cluster, port: cfg.Port}).stop(context.Background()) }()
	for _, sc := range cfg.Scenarios {
		var v *verdict
		var err error
		began := time.Now()
		switch sc {
		case "soak":
			v, err = runSoak(ctx, cfg, out)
		case "longtx":
			v, err = runLongTx(ctx, cfg, out)
		case "deadgroup":
			err = runDeadGroup(ctx, cfg, out)
		case "failover-sync":
			v, err = runFailover(ctx, cfg, out, true)
		case "failover-async":
			v, err = runFailover(ctx, cfg, out, false)
		}
		sum.add(v)
		fmt.Fprintf(out, "%s: took %s\n", sc, time.Since(began).Round(100*time.Millisecond))
		if err != nil {
			cfg.Logger.Error("scenario failed", "scenario", sc, "error", err)
			sum.Problems = append(sum.Problems, fmt.Sprintf("%s: %v", sc, err))
		}
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
	}
	for _, p := range sum.Problems {
		fmt.Fprintln(out, "problem:", p)
	}
	return sum, nil
}
