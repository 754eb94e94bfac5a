package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/gen"
)

const sysbenchDBName = "sbtest"

// Sysbench's parameters, as its OLTP scripts default them.
const (
	sbPointSelects = 10  // point selects in oltp_read_only
	sbRangeSize    = 100 // rows of each range query
	sbRandomPoints = 10  // k values of select_random_points
	sbRandomRanges = 10  // ranges of select_random_ranges
	sbRangeDelta   = 5   // each is k BETWEEN v AND v+delta
	sbJoinLimit    = 500 // rows of index_join and index_join_scan
)

// sbSession is one path's open database: one connection, as sysbench's
// one thread has, with its statements prepared.
type sbSession struct {
	conn  *sql.Conn
	stmts map[string]map[string]*sql.Stmt // by test, by name
	test  string                          // the test being run
}

// query runs a prepared statement of the current test and reads every
// row.
func (s *sbSession) query(ctx context.Context, name string, args ...any) (int, error) {
	rows, err := s.stmts[s.test][name].QueryContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return drain(rows)
}

// sbTest is one read test: its statements (name → SQL) and its event.
type sbTest struct {
	name  string
	about string
	stmts map[string]string
	// fixed tests have no random parameters: every path must return the
	// same rows.
	fixed bool
	event func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error)
}

// uniform returns an id in [1, n].
func uniform(rng *rand.Rand, n int) int { return rng.IntN(n) + 1 }

// sysbenchTests are the read tests, for tables of rows rows.
func sysbenchTests(rows int) []sbTest {
	perTable := func(format string) map[string]string {
		return map[string]string{"1": fmt.Sprintf(format, 1), "2": fmt.Sprintf(format, 2)}
	}
	table := func(rng *rand.Rand) string { return fmt.Sprint(rng.IntN(2) + 1) }
	half := rows / 2
	rangeStart := func(rng *rand.Rand, width int) int { return uniform(rng, max(1, rows-width+1)) }
	inList := "?" + strings.Repeat(", ?", sbRandomPoints-1)
	ranges := "k BETWEEN ? AND ?" + strings.Repeat(" OR k BETWEEN ? AND ?", sbRandomRanges-1)
	point := perTable("SELECT c FROM sbtest%d WHERE id = ?")
	readOnly := map[string]string{}
	// Named in the order the event runs them (the report lists them
	// sorted by name).
	for t, q := range map[string]string{
		"0point":    "SELECT c FROM sbtest%d WHERE id = ?",
		"1simple":   "SELECT c FROM sbtest%d WHERE id BETWEEN ? AND ?",
		"2sum":      "SELECT SUM(k) FROM sbtest%d WHERE id BETWEEN ? AND ?",
		"3order":    "SELECT c FROM sbtest%d WHERE id BETWEEN ? AND ? ORDER BY c",
		"4distinct": "SELECT DISTINCT c FROM sbtest%d WHERE id BETWEEN ? AND ? ORDER BY c",
	} {
		for tbl := 1; tbl <= 2; tbl++ {
			readOnly[t+fmt.Sprint(tbl)] = fmt.Sprintf(q, tbl)
		}
	}
	one := func(name string, args ...any) func(context.Context, *sbSession, *rand.Rand) (int, error) {
		return func(ctx context.Context, s *sbSession, _ *rand.Rand) (int, error) { return s.query(ctx, name, args...) }
	}
	return []sbTest{
		{
			name: "oltp_point_select", about: "one primary-key lookup of a random id in a random table",
			stmts: point,
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				return s.query(ctx, table(rng), uniform(rng, rows))
			},
		},
		{
			name: "oltp_read_only", about: fmt.Sprintf("a transaction: %d point selects, then a range of %d ids read plain, summed, ordered and distinct; each group of statements on a random table", sbPointSelects, sbRangeSize),
			stmts: readOnly,
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				if _, err := s.conn.ExecContext(ctx, "BEGIN"); err != nil {
					return 0, err
				}
				n := 0
				err := func() error {
					t := table(rng)
					for i := 0; i < sbPointSelects; i++ {
						k, err := s.query(ctx, "0point"+t, uniform(rng, rows))
						if err != nil {
							return err
						}
						n += k
					}
					for _, q := range []string{"1simple", "2sum", "3order", "4distinct"} {
						t := table(rng)
						lo := rangeStart(rng, sbRangeSize)
						k, err := s.query(ctx, q+t, lo, lo+sbRangeSize-1)
						if err != nil {
							return err
						}
						n += k
					}
					return nil
				}()
				if _, cerr := s.conn.ExecContext(ctx, "COMMIT"); err == nil {
					err = cerr
				}
				return n, err
			},
		},
		{
			name: "select_random_points", about: fmt.Sprintf("rows of %d random k values (IN list, through the index on k) in sbtest1", sbRandomPoints),
			stmts: map[string]string{"q": "SELECT id, k, c, pad FROM sbtest1 WHERE k IN (" + inList + ")"},
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				args := make([]any, sbRandomPoints)
				for i := range args {
					args[i] = uniform(rng, rows)
				}
				return s.query(ctx, "q", args...)
			},
		},
		{
			name: "select_random_ranges", about: fmt.Sprintf("count over %d random ranges of k, each %d values wide, in sbtest1", sbRandomRanges, sbRangeDelta+1),
			stmts: map[string]string{"q": "SELECT count(k) FROM sbtest1 WHERE " + ranges},
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				args := make([]any, 0, 2*sbRandomRanges)
				for i := 0; i < sbRandomRanges; i++ {
					lo := rangeStart(rng, sbRangeDelta+1)
					args = append(args, lo, lo+sbRangeDelta)
				}
				return s.query(ctx, "q", args...)
			},
		},
		{
			name: "covering_index_scan", about: "count of the ids of half the rows, from the index on k alone (covering)", fixed: true,
			stmts: map[string]string{"q": "SELECT count(id) FROM sbtest1 WHERE k > ?"},
			event: one("q", half),
		},
		{
			name: "index_scan", about: "every column of half the rows, found through the index on k (a row lookup per index entry)", fixed: true,
			stmts: map[string]string{"q": "SELECT * FROM sbtest1 INDEXED BY k_1 WHERE k > ?"},
			event: one("q", half),
		},
		{
			name: "table_scan", about: "every column of half the rows, by reading the whole table", fixed: true,
			stmts: map[string]string{"q": "SELECT * FROM sbtest1 NOT INDEXED WHERE k > ?"},
			event: one("q", half),
		},
		{
			name: "types_table_scan", about: "every column of the rows of sbtypes with a positive big_int_col (half), by reading the whole table", fixed: true,
			stmts: map[string]string{"q": "SELECT * FROM sbtypes NOT INDEXED WHERE big_int_col > 0"},
			event: one("q"),
		},
		{
			name: "groupby_scan", about: "an aggregate over half of sbtypes grouped by year and set, ordered by year", fixed: true,
			stmts: map[string]string{"q": "SELECT year_col, count(year_col), max(big_int_col), avg(small_int_col) FROM sbtypes NOT INDEXED WHERE big_int_col > 0 GROUP BY year_col, set_col ORDER BY year_col"},
			event: one("q"),
		},
		{
			name: "index_join", about: fmt.Sprintf("%d rows of sbtest2 from a random id, each joined to the sbtest1 row whose id is its k (a primary-key lookup per row)", sbJoinLimit),
			stmts: map[string]string{"q": fmt.Sprintf("SELECT a.id, a.k, b.id, b.k FROM sbtest2 AS b JOIN sbtest1 AS a ON a.id = b.k WHERE b.id >= ? LIMIT %d", sbJoinLimit)},
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				return s.query(ctx, "q", rangeStart(rng, sbJoinLimit))
			},
		},
		{
			name: "index_join_scan", about: fmt.Sprintf("%d rows of sbtest1 from a random id joined to themselves on the primary key", sbJoinLimit),
			stmts: map[string]string{"q": fmt.Sprintf("SELECT a.* FROM sbtest1 AS a JOIN sbtest1 AS b ON b.id = a.id WHERE a.id >= ? LIMIT %d", sbJoinLimit)},
			event: func(ctx context.Context, s *sbSession, rng *rand.Rand) (int, error) {
				return s.query(ctx, "q", rangeStart(rng, sbJoinLimit))
			},
		},
	}
}

// runSysbench is Dolt's sysbench read tests adapted to SQLite: the
// median latency of each test through the local file and through the
// warm service, the multiplier per test, and their mean,
// reads_mean_multiplier.
func runSysbench(ctx context.Context, r *Runner) error {
	cfg, rep := r.Config, r.Report
	rowsN := pick(cfg.Scale, 2_000, 50_000, 500_000)
	load := cfg.load(Load{
		Clients:  1,
		Warmup:   pick(cfg.Scale, 10*time.Millisecond, 500*time.Millisecond, 2*time.Second),
		Duration: pick(cfg.Scale, 40*time.Millisecond, 2*time.Second, 10*time.Second),
		MinCount: pick(cfg.Scale, 2, 5, 10),
	})
	// One run of one test on one path may not take longer than this: a
	// test too slow for a path (the store directly, a scan) is dropped
	// from that path with a note.
	budget := max(pick(cfg.Scale, 20*time.Second, 60*time.Second, 5*time.Minute), 10*(load.Warmup+load.Duration))

	rig, err := startSQLRig(ctx, r, "sysbench", fmt.Sprintf("sysbench-%d.sqlite", rowsN), sysbenchDBName, "chunkd-bench-sysbench", func(path string) error {
		return gen.Sysbench(path, gen.SysbenchOptions{Rows: rowsN, Seed: 1})
	})
	if err != nil {
		return err
	}
	defer rig.close(r)
	tests := sysbenchTests(rowsN)
	err = rig.openPaths(ctx, r, nil, map[string]string{
		pathService:    "the warm service (the database's files on its disk) and a client without a memory tier: every page SQLite's cache misses is a request to the service",
		pathServiceMem: "the warm service and a client with its default memory tier (256 MiB), into which every page was read before measuring: a database that fits is then served from the process's memory",
	}, func(p *sqlPathDB) (err error) {
		p.sess, err = newSbSession(ctx, p.db, tests)
		return err
	})
	if err != nil {
		return err
	}

	rig.setEnv(r, fmt.Sprintf("gen.Sysbench: sbtest1 and sbtest2 of %d rows each (index on k), sbtypes of %d rows (index on big_int_col), seed 1", rowsN, rowsN))
	rep.Env.Set("connections", "one open database per path for the whole run, with one SQLite connection (sysbench's one thread), statements prepared once; SQLite's default page cache (2000 KiB) per connection")
	rep.Env.Set("timing", "per test, path and run: warm-up %s, then %s; runs outermost, then tests, then paths, so drift falls on every path alike; a run of a test on a path longer than %s drops that test from that path", load.Warmup, describeLoad(load), budget)
	rep.Env.Set("keys", "uniform over the ids (and k values) of the tables (sysbench's default distribution is its 'special' one, which favours some keys)")

	m, err := measureSysbench(ctx, r, rig.paths, tests, load, budget)
	if err != nil {
		return err
	}
	reportSysbench(rep, rig, tests, m)
	return nil
}

// measureSysbench runs every test on every path, runs outermost, then
// tests, then paths, so drift falls on every path alike.
func measureSysbench(ctx context.Context, r *Runner, paths []*sqlPathDB, tests []sbTest, load Load, budget time.Duration) (*sqlRuns, error) {
	m := newSQLRuns(r.Report, budget)
	rowsSeen := map[string]int{} // fixed tests: rows per event
	for run := 1; run <= r.Config.Runs; run++ {
		for _, t := range tests {
			for _, p := range paths {
				p.sess.test = t.name
				s, ok, err := m.drive(ctx, run, t.name+" on "+p.name, caseKey{t.name, p.name, 1}, p, load, func(ctx context.Context, _ int, rng *rand.Rand) error {
					n, err := t.event(ctx, p.sess, rng)
					if err != nil {
						return p.db.QueryError(err)
					}
					if t.fixed {
						if n == 0 {
							return fmt.Errorf("%s returned no rows", t.name)
						}
						if want, ok := rowsSeen[t.name]; !ok {
							rowsSeen[t.name] = n
						} else if n != want {
							return fmt.Errorf("%s returned %d rows on %s, %d on another path: %w", t.name, n, p.name, want, errRows)
						}
					}
					return nil
				})
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
				x := s.Stats()
				r.Report.Samples(t.name, p.name, 1, s.Lat)
				r.Logf("sysbench: run %d/%d %-20s %-13s p50 %s ms, p95 %s ms (%d events)", run, r.Config.Runs, t.name, p.name, fmtMS(us(x.P50)), fmtMS(us(x.P95)), x.Count)
			}
		}
	}
	return m, nil
}

// reportSysbench writes the headline tables, in the shape of Dolt's, the
// statements and where the pages came from.
func reportSysbench(rep *Report, rig *sqlRig, tests []sbTest, m *sqlRuns) {
	var keys []caseKey
	for _, t := range tests {
		for _, p := range rig.paths {
			keys = append(keys, caseKey{t.name, p.name, 1})
		}
	}
	m.summarize(keys)

	var b strings.Builder
	b.WriteString("Dolt's sysbench read tests, adapted to SQLite, on a sysbench-shaped database (see *Statements* below), one thread, each test's events back to back. " +
		"The figure per test is its median latency, as in Dolt's release tables; the multiplier is a path's median over the local file's, and `reads_mean_multiplier` the mean of a path's multipliers over the tests. Paths:\n\n")
	rig.describePaths(&b)
	b.WriteString("\nEach path keeps one open database (client, SQLite connection and its page cache) across all tests, runs and iterations, as an application does: after the warm-up, the pages a test reads again are in SQLite's page cache on every path, and the figures are steady state, not first reads.\n\n")
	writeMultipliers(&b, rep, rig.pathNames()[1:], tests)
	rep.Intro = b.String()

	m.setHitRatios(rig.pathNames())
	rep.Section("Statements", sysbenchStatements(tests))

	var w strings.Builder
	w.WriteString("Per event, summed over the measured parts of all runs: pages SQLite read through the VFS (its page-cache misses) and, for the chunkd paths, the requests the client made to the service (a list or run of pages fetched ahead is one) and which tier served the pages (client.Stats).\n\n")
	w.WriteString("| test | path " + tierTableHeader + "\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	m.pagesTable(&w, keys, func(k caseKey) string { return fmt.Sprintf("| %s | %s |", k.cs, k.path) })
	rep.Section("Where the pages came from", w.String())
	var cached []string
	for _, t := range tests {
		if sp := m.splits[caseKey{t.name, pathLocal, 1}]; sp != nil && sp.ops > 0 && float64(sp.pageReads)/float64(sp.ops) < 0.01 {
			cached = append(cached, t.name)
		}
	}
	if len(cached) > 0 {
		rep.Notef("%s read their pages from SQLite's own page cache alone once warm (no page read through the VFS): on every path they measure SQLite, and their multipliers of about 1 say nothing about chunkd's tiers, though they count in reads_mean_multiplier as Dolt's count in theirs.",
			strings.Join(cached, ", "))
	}
	rep.Notef("Read tests only: the database is an immutable version, so sysbench's write tests have no counterpart.")
	rep.Notef("Latency is per event on the client's side; there is no server in front of SQLite, so unlike Dolt's and MySQL's figures these carry no network round trip or wire encoding on the local path, which makes the multipliers larger than a server-to-server comparison would.")
}

// writeMultipliers writes the latency tables: the median (and p95)
// latency per test in milliseconds on the local file and on each of
// others, each with its multiple of local's; then each path's
// reads_mean_multiplier, the mean of its median multipliers.
func writeMultipliers(b *strings.Builder, rep *Report, others []string, tests []sbTest) {
	mults := map[string][]float64{}
	for _, pct := range []struct {
		title string
		get   func(Result) float64
	}{{"latency_median", func(x Result) float64 { return x.P50US }}, {"latency_p95", func(x Result) float64 { return x.P95US }}} {
		fmt.Fprintf(b, "**%s** (ms):\n\n| read_tests | local |", pct.title)
		for _, o := range others {
			fmt.Fprintf(b, " %s | multiplier |", o)
		}
		b.WriteString("\n|---|--:|" + strings.Repeat("--:|--:|", len(others)) + "\n")
		for _, t := range tests {
			base, ok := rep.find(t.name, pathLocal, 1)
			fmt.Fprintf(b, "| %s | %s |", t.name, map[bool]string{true: fmtMS(pct.get(base)), false: "–"}[ok])
			for _, o := range others {
				res, rok := rep.find(t.name, o, 1)
				if !ok || !rok {
					b.WriteString(" – | – |")
					continue
				}
				m := pct.get(res) / pct.get(base)
				fmt.Fprintf(b, " %s | %.2f |", fmtMS(pct.get(res)), m)
				if pct.title == "latency_median" {
					mults[o] = append(mults[o], m)
					rep.Metric(t.name, o, 1, "multiplier", m)
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	for _, o := range others {
		if len(mults[o]) == 0 {
			continue
		}
		var sum float64
		for _, m := range mults[o] {
			sum += m
		}
		mean := sum / float64(len(mults[o]))
		extra := ""
		if len(mults[o]) < len(tests) {
			extra = fmt.Sprintf(" (over the %d of %d tests it finished)", len(mults[o]), len(tests))
		}
		fmt.Fprintf(b, "- `%s` reads_mean_multiplier: **%.2f**%s\n", o, mean, extra)
		rep.Metric("reads", o, 1, "reads_mean_multiplier", mean)
	}
	b.WriteString("\n")
}

// sysbenchStatements is the Statements section: how the tests differ
// from Dolt's, and each test's statements.
func sysbenchStatements(tests []sbTest) string {
	var s strings.Builder
	s.WriteString("Written for SQLite from the published definitions of sysbench's OLTP scripts and Dolt's read-test scripts. Differences: SQLite has no server, so there is no network hop or wire format on any path; " +
		"Dolt's scans filter columns of its own typed sbtest1, which the narrow sbtest tables (id, k, c, pad) lack, so ours filter k; k is indexed and SQLite's planner would answer through the index (a row lookup per entry), so the scans that Dolt names table scans say NOT INDEXED, and index_scan says INDEXED BY; " +
		"sbtypes' set_col has 14 values where Dolt's has 3, so groupby_scan returns more groups; " +
		"Dolt's joins read the first 500 rows every time, ours start at a uniform random id so that each event reads other pages; the scans use the sbtest tables (and sbtypes for the typed ones) instead of Dolt's own typed sbtest1.\n\n")
	s.WriteString("| test | what it does | statements |\n|---|---|---|\n")
	for _, t := range tests {
		var qs []string
		seen := map[string]bool{}
		for _, q := range sortedKeys(t.stmts) {
			text := t.stmts[q]
			if strings.HasSuffix(q, "2") && strings.Contains(text, "sbtest2") && !strings.Contains(t.name, "join") {
				continue // the same statement on the other table
			}
			if !seen[text] {
				seen[text] = true
				qs = append(qs, "`"+text+"`")
			}
		}
		fmt.Fprintf(&s, "| %s | %s | %s |\n", t.name, t.about, strings.Join(qs, "<br>"))
	}
	return s.String()
}

// newSbSession takes a connection of d and prepares every test's
// statements on it.
func newSbSession(ctx context.Context, d *sqlDB, tests []sbTest) (*sbSession, error) {
	d.SetMaxOpenConns(1)
	conn, err := d.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &sbSession{conn: conn, stmts: map[string]map[string]*sql.Stmt{}}
	for _, t := range tests {
		s.stmts[t.name] = map[string]*sql.Stmt{}
		for name, q := range t.stmts {
			st, err := conn.PrepareContext(ctx, q)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("prepare %s: %w", q, d.QueryError(err))
			}
			s.stmts[t.name][name] = st
		}
	}
	return s, nil
}

func (s *sbSession) close() {
	for _, m := range s.stmts {
		for _, st := range m {
			st.Close()
		}
	}
	s.conn.Close()
}

// statsSnap is a path's counters at one moment.
type statsSnap struct {
	stats client.Stats
	pages int64
}

func snap(d *sqlDB) statsSnap { return statsSnap{d.stats(), d.PageReads()} }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
