package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

func init() { register(66, captureScenario{}) }

// captureScenario measures change capture (fanout.capture_table): the same
// statements on four copies of one table, in alternating rounds on one
// connection (autocommit):
//
//   - bare: no trigger;
//   - pgq: captured into a queue topic, one message per row (statement-level
//     triggers);
//   - pgq statement: captured into a queue topic with shape => 'statement'
//     (one message per statement; 1,000 rows are a claim-check);
//   - PgQ jsontriga / logutriga: Skytools PgQ's row triggers into a PgQ
//     queue (when the extension is on the server).
//
// Single-row INSERT, UPDATE and DELETE (statements per second) and
// 1,000-row INSERT ... SELECT, UPDATE and DELETE (time per statement).
// Targets: single rows at least as fast as PgQ's jsontriga (ratio ≥ 1.0),
// and their overhead over the bare table at most jsontriga's;
// 1,000-row statements within 1.3 × the bare table (bare/pgq ≥ 0.77) and
// no slower than PgQ's jsontriga (ratio ≥ 1.0); the same 1,000-row rows for
// the statement shape.
type captureScenario struct{}

func (captureScenario) Name() string { return "capture" }
func (captureScenario) Title() string {
	return "6c. Change capture: statements on a captured table vs the bare table and PgQ's jsontriga/logutriga"
}

const captureDDL = `CREATE TABLE %s (id bigint PRIMARY KEY, status text NOT NULL, total numeric NOT NULL, note text)`

func (captureScenario) Run(ctx context.Context, env *Env) ([]Result, error) {
	db, err := env.NewDB(ctx, "capture", 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tables := []string{"cap_bare", "cap_pgq", "cap_stmt"}
	for _, sql := range []string{
		fmt.Sprintf(captureDDL, "cap_bare"), fmt.Sprintf(captureDDL, "cap_pgq"), fmt.Sprintf(captureDDL, "cap_stmt"),
		`SELECT fanout.create_topic('capture.bench', notify => false)`,
		`SELECT fanout.capture_table('cap_pgq', 'capture.bench')`,
		`SELECT fanout.create_topic('capture.bench.stmt', notify => false)`,
		`SELECT fanout.capture_table('cap_stmt', 'capture.bench.stmt', shape => 'statement')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
	}
	havePgQ := false
	var version *string
	if err := db.Pool.QueryRow(ctx, `SELECT default_version FROM pg_available_extensions WHERE name = 'pgq'`).
		Scan(&version); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if version != nil {
		if _, err := db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgq`); err == nil {
			havePgQ = true
			for _, sql := range []string{
				fmt.Sprintf(captureDDL, "cap_jsontriga"), fmt.Sprintf(captureDDL, "cap_logutriga"),
				`SELECT pgq.create_queue('capture_bench')`,
				`CREATE TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON cap_jsontriga
				 FOR EACH ROW EXECUTE FUNCTION pgq.jsontriga('capture_bench')`,
				`CREATE TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON cap_logutriga
				 FOR EACH ROW EXECUTE FUNCTION pgq.logutriga('capture_bench')`,
			} {
				if _, err := db.Pool.Exec(ctx, sql); err != nil {
					return nil, fmt.Errorf("%s: %w", sql, err)
				}
			}
			tables = append(tables, "cap_jsontriga", "cap_logutriga")
		}
	}
	env.Baseline("bare table", fmt.Sprintf(captureDDL, "t")+";  -- no trigger; the same statements")
	env.Baseline("PgQ jsontriga", "CREATE TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION pgq.jsontriga('q')")

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rounds := env.N(7, 3)
	singles := env.N(2000, 300)

	// Single rows: per round, per table, `singles` inserts, updates, deletes.
	single := map[string]map[string][]float64{}
	for _, t := range tables {
		single[t] = map[string][]float64{}
	}
	base := int64(0)
	for r := 0; r < rounds; r++ {
		for i := range tables {
			t := tables[(i+r)%len(tables)] // the order rotates between rounds
			for _, op := range []struct{ name, sql string }{
				{"insert", `INSERT INTO ` + t + ` VALUES ($1, 'new', 10.5, 'x')`},
				{"update", `UPDATE ` + t + ` SET status = 'paid' WHERE id = $1`},
				{"delete", `DELETE FROM ` + t + ` WHERE id = $1`},
			} {
				start := time.Now()
				for k := 0; k < singles; k++ {
					if _, err := conn.Exec(ctx, op.sql, base+int64(k)); err != nil {
						return nil, fmt.Errorf("%s: %w", op.sql, err)
					}
				}
				single[t][op.name] = append(single[t][op.name], float64(singles)/time.Since(start).Seconds())
			}
		}
		base += int64(singles)
	}
	// 1,000-row statements: per round, per table, one of each, 5 times.
	bulk := map[string]map[string][]float64{}
	for _, t := range tables {
		bulk[t] = map[string][]float64{}
	}
	for r := 0; r < rounds; r++ {
		for i := range tables {
			t := tables[(i+r)%len(tables)]
			for rep := 0; rep < 5; rep++ {
				for _, op := range []struct{ name, sql string }{
					{"insert", `INSERT INTO ` + t + ` SELECT g, 'new', g * 1.5, 'bulk' FROM generate_series(1, 1000) g`},
					{"update", `UPDATE ` + t + ` SET status = 'paid', total = total + 1`},
					{"delete", `DELETE FROM ` + t},
				} {
					start := time.Now()
					if _, err := conn.Exec(ctx, op.sql); err != nil {
						return nil, fmt.Errorf("%s: %w", op.sql, err)
					}
					bulk[t][op.name] = append(bulk[t][op.name], time.Since(start).Seconds()*1000)
				}
			}
		}
	}
	if _, err := conn.Exec(ctx, `TRUNCATE cap_bare`); err != nil {
		return nil, err
	}

	var out []Result
	for _, op := range []string{"insert", "update", "delete"} {
		ours := median(single["cap_pgq"][op])
		env.Logf("capture single-row %s: bare %.0f/s, pgq %.0f/s, pgq statement %.0f/s, jsontriga %.0f/s, logutriga %.0f/s", op,
			median(single["cap_bare"][op]), ours, median(single["cap_stmt"][op]), median(single["cap_jsontriga"][op]),
			median(single["cap_logutriga"][op]))
		if havePgQ {
			r := throughputRow("capture", "single-row "+op+", captured vs PgQ jsontriga", "stmt/s",
				ours, median(single["cap_jsontriga"][op]), "PgQ jsontriga", 1.0)
			r.Note = fmt.Sprintf("bare table %.0f/s; PgQ logutriga %.0f/s", median(single["cap_bare"][op]),
				median(single["cap_logutriga"][op]))
			out = append(out, r)
		} else {
			out = append(out, Result{Scenario: "capture", Case: "single-row " + op + ", captured vs PgQ jsontriga",
				Ratio: ratio(0, 0), ValueText: fmt.Sprintf("%.0f stmt/s", ours),
				Note: fmt.Sprintf("PgQ is not installed; bare table %.0f/s", median(single["cap_bare"][op]))})
		}
	}
	// The target of single rows in the words: the per-row overhead
	// (time per statement over the bare table's, paired per round) at most
	// PgQ jsontriga's.
	if havePgQ {
		for _, op := range []string{"insert", "update", "delete"} {
			ours := medianOverhead(single["cap_pgq"][op], single["cap_bare"][op])
			pgq := medianOverhead(single["cap_jsontriga"][op], single["cap_bare"][op])
			env.Logf("capture single-row %s overhead over the bare table: pgq %.3f ms, jsontriga %.3f ms, logutriga %.3f ms",
				op, ours, pgq, medianOverhead(single["cap_logutriga"][op], single["cap_bare"][op]))
			r := throughputRow("capture", "single-row "+op+" overhead over the bare table, captured vs PgQ jsontriga (time⁻¹)",
				"1/ms", 1/ours, 1/pgq, "PgQ jsontriga", 1.0)
			r.Note = fmt.Sprintf("%.3f ms vs %.3f ms per statement over the bare table's %.3f ms", ours, pgq,
				1000/median(single["cap_bare"][op]))
			out = append(out, r)
		}
	}
	for _, op := range []string{"insert", "update", "delete"} {
		ours, bare := median(bulk["cap_pgq"][op]), median(bulk["cap_bare"][op])
		env.Logf("capture 1,000-row %s: bare %.2f ms, pgq %.2f ms, jsontriga %.2f ms", op, bare, ours,
			median(bulk["cap_jsontriga"][op]))
		r := throughputRow("capture", "1,000-row "+op+" statement, captured vs bare (time⁻¹)", "stmt/s",
			1000/ours, 1000/bare, "bare table", 1/1.3)
		r.Note = fmt.Sprintf("%.2f ms vs %.2f ms bare", ours, bare)
		if havePgQ {
			r.Note += fmt.Sprintf("; PgQ jsontriga %.2f ms", median(bulk["cap_jsontriga"][op]))
		}
		out = append(out, r)
		if havePgQ {
			pgq := median(bulk["cap_jsontriga"][op])
			r := throughputRow("capture", "1,000-row "+op+" statement, captured vs PgQ jsontriga (time⁻¹)", "stmt/s",
				1000/ours, 1000/pgq, "PgQ jsontriga", 1.0)
			r.Note = fmt.Sprintf("%.2f ms vs %.2f ms PgQ jsontriga; PgQ logutriga %.2f ms", ours, pgq,
				median(bulk["cap_logutriga"][op]))
			out = append(out, r)
		}
	}
	// The statement shape: one message per statement, the 1,000 rows a
	// claim-check (two chunk rows per side).
	for _, op := range []string{"insert", "update", "delete"} {
		ours, bare := median(bulk["cap_stmt"][op]), median(bulk["cap_bare"][op])
		env.Logf("capture 1,000-row %s, shape statement: bare %.2f ms, pgq statement %.2f ms, jsontriga %.2f ms", op, bare, ours,
			median(bulk["cap_jsontriga"][op]))
		r := throughputRow("capture", "1,000-row "+op+" statement, captured shape statement vs bare (time⁻¹)", "stmt/s",
			1000/ours, 1000/bare, "bare table", 1/1.3)
		r.Note = fmt.Sprintf("%.2f ms vs %.2f ms bare", ours, bare)
		out = append(out, r)
		if havePgQ {
			pgq := median(bulk["cap_jsontriga"][op])
			r := throughputRow("capture", "1,000-row "+op+" statement, captured shape statement vs PgQ jsontriga (time⁻¹)", "stmt/s",
				1000/ours, 1000/pgq, "PgQ jsontriga", 1.0)
			r.Note = fmt.Sprintf("%.2f ms vs %.2f ms PgQ jsontriga", ours, pgq)
			out = append(out, r)
		}
	}
	return out, nil
}

// medianOverhead is the median over rounds of the time per statement (ms)
// of rates (statements per second, one per round) over the baseline's of the
// same round.
func medianOverhead(rates, base []float64) float64 {
	var d []float64
	for i := range rates {
		if i < len(base) && rates[i] > 0 && base[i] > 0 {
			d = append(d, 1000/rates[i]-1000/base[i])
		}
	}
	return median(d)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
