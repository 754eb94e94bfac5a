package bench

// What the sysbench and title5 suites share: a generated database
// imported into a store, a warm service over it, one open database per
// path kept for the whole suite, and the runs of each case on each path,
// a case dropped from a path when it fails or overruns its budget.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/chunkd/chunkd/sqlitevfs"
)

// sqlRig is a data set, a warm service over its store, and the paths open
// on it.
type sqlRig struct {
	ds          *sqlDataset
	svc         *sqlService
	binary, how string        // the service's binary, and where it came from
	fetched     time.Duration // the appendix was on the service's disk this long after its start
	cacheDir    string        // the service's cache dir (the same-host path reads it)
	paths       []*sqlPathDB
}

// sqlPathDB is one path's database, open for the whole suite.
type sqlPathDB struct {
	name  string
	about string
	db    *sqlDB
	sess  *sbSession // sysbench's statements on it
}

func (p *sqlPathDB) close() {
	if p.sess != nil {
		p.sess.close()
	}
	if p.db != nil {
		p.db.close()
	}
}

// localAbout describes the local path in the SQL suites' reports.
const localAbout = "the SQLite file on local disk, through the same VFS (pread per page; the file is in the OS page cache): the baseline"

// startSQLRig generates (with gen) and imports the data set file name as
// database db, starts a service over it in the cache dir cacheName, and
// waits until it has downloaded the database.
func startSQLRig(ctx context.Context, r *Runner, suite, name, db, cacheName string, gen func(path string) error) (*sqlRig, error) {
	rig := &sqlRig{}
	var err error
	if rig.ds, err = prepareSQLDataset(ctx, r, name, db, r.Config.rtt(), gen); err != nil {
		return nil, err
	}
	if rig.binary, rig.how, err = serviceBinary(ctx, r); err != nil {
		rig.ds.close()
		return nil, err
	}
	r.Logf("%s: starting the service and downloading the database", suite)
	rig.cacheDir = filepath.Join(r.Config.CacheDir, cacheName)
	if rig.svc, rig.fetched, err = warmService(ctx, r, rig.binary, rig.ds, rig.cacheDir); err != nil {
		rig.ds.close()
		return nil, err
	}
	return rig, nil
}

// close closes the paths, stops the service (noting in rep if it did not
// stop cleanly) and closes the store.
func (rig *sqlRig) close(r *Runner) {
	for _, p := range rig.paths {
		p.close()
	}
	if err := rig.svc.stop(r.Config.Keep); err != nil {
		r.Report.Notef("The service did not stop cleanly: %v", err)
	}
	rig.ds.close()
}

// sameHostAbout describes the same-host path of the suites on a rig.
const sameHostAbout = "the warm service on this host and a client without a memory tier that reads the version's pages from the service's page image (a pread and a CRC per page, no request), and what the image lacks from the service's verified files (`chunkd sql --service-dir`)"

// openPaths opens the local path and the warm service's paths (with and
// without a memory tier, described by the abouts given, keyed by path
// name), and with Config.StoreDirect the store directly, each with the
// SQLite options o; then calls prepare on each.
func (rig *sqlRig) openPaths(ctx context.Context, r *Runner, o *sqlitevfs.Options, abouts map[string]string, prepare func(*sqlPathDB) error) error {
	ds, svc, cfg := rig.ds, rig.svc, r.Config
	rig.paths = []*sqlPathDB{
		{name: pathLocal, about: localAbout},
		{name: pathService, about: abouts[pathService]},
		{name: pathServiceMem, about: abouts[pathServiceMem]},
		{name: pathSameHost, about: sameHostAbout},
	}
	if cfg.StoreDirect {
		rig.paths = append(rig.paths, &sqlPathDB{name: pathStoreDirect, about: fmt.Sprintf("no service: a client without a memory tier reading the store itself, every request paying the emulated round trip (%s)", cfg.rtt())})
	}
	if len(cfg.Paths) > 0 {
		rig.paths = onlyPaths(rig.paths, cfg.Paths)
	}
	for _, p := range rig.paths {
		var err error
		switch p.name {
		case pathLocal:
			p.db, err = openLocalDB(ds.file, o)
		case pathService:
			p.db, err = openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, mem: -1, sqlite: o, log: cfg.Log})
		case pathServiceMem:
			p.db, err = openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, prewarm: true, sqlite: o, log: cfg.Log})
		case pathSameHost:
			p.db, err = openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, sameHost: true, mem: -1, sqlite: o, log: cfg.Log})
		case pathStoreDirect:
			p.db, err = openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, mem: -1, sqlite: o, log: cfg.Log})
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", p.name, err)
		}
		if err := prepare(p); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// threadPaths are the paths of the suites that measure thread counts
// (sysbench, title5) besides the local file, in their order.
var threadPaths = []string{pathService, pathServiceMem, pathSameHost, pathStoreDirect}

// checkPaths refuses Config.Paths that name no path of a thread-count
// suite, or that are given to another suite, before any data set is made.
func checkPaths(suite string, cfg Config) error {
	if len(cfg.Paths) == 0 {
		return nil
	}
	if suite != "sysbench" && suite != "title5" {
		return fmt.Errorf("--paths: only sysbench and title5 choose paths, not %s", suite)
	}
	for _, n := range cfg.Paths {
		if !slices.Contains(threadPaths, n) {
			return fmt.Errorf("--paths: no path %q (have: %s)", n, strings.Join(threadPaths, ", "))
		}
		if n == pathStoreDirect && !cfg.StoreDirect {
			return fmt.Errorf("--paths: %s is measured only with --store-direct", n)
		}
	}
	return nil
}

// onlyPaths keeps the local path and those named (checkPaths checked the
// names), in the suite's order.
func onlyPaths(paths []*sqlPathDB, names []string) []*sqlPathDB {
	var kept []*sqlPathDB
	for _, p := range paths {
		if p.name == pathLocal || slices.Contains(names, p.name) {
			kept = append(kept, p)
		}
	}
	return kept
}

// setEnv records the data set (what made it: dataset), the store and the
// service in the environment block.
func (rig *sqlRig) setEnv(r *Runner, dataset string) {
	env := r.Report.Env
	env.Set("data set", "%s", rig.ds.describe(dataset))
	env.Set("store", "local folder (file://) %s, read by the service (and store-direct) through %s", rig.ds.storeDir, storeEmulation(r.Config.rtt(), r.Config.Bandwidth))
	env.Set("service", "%s; the appendix file was on its disk %s after it started", serviceArgsNote(r, rig.binary, rig.how), rig.fetched.Round(time.Millisecond))
}

// pathNames returns the paths' names, in order.
func (rig *sqlRig) pathNames() []string {
	names := make([]string, len(rig.paths))
	for i, p := range rig.paths {
		names[i] = p.name
	}
	return names
}

// describePaths writes a list item per path with what it is.
func (rig *sqlRig) describePaths(b *strings.Builder) {
	for _, p := range rig.paths {
		fmt.Fprintf(b, "- `%s`: %s.\n", p.name, p.about)
	}
}

// caseKey names one case of a suite on one path with a thread count.
type caseKey struct {
	cs, path string
	threads  int
}

// sqlRuns is what a SQL suite measured per case, path and thread count:
// each run's Stats, where the pages came from over all runs, and the
// cases dropped (with why).
type sqlRuns struct {
	rep    *Report
	budget time.Duration // the longest one run of a case may take
	stats  map[caseKey][]Stats
	splits map[caseKey]*tierSplit
	failed map[caseKey]error
}

func newSQLRuns(rep *Report, budget time.Duration) *sqlRuns {
	return &sqlRuns{rep: rep, budget: budget, stats: map[caseKey][]Stats{}, splits: map[caseKey]*tierSplit{}, failed: map[caseKey]error{}}
}

// drive runs l with op on path p as run number run of case k, within the
// budget, and adds its figures. When the case was dropped before, or
// fails now (what names it in the note that says so), it returns ok
// false. The error is what ends the suite: a canceled ctx, or a wrong
// answer (errRows).
//
// op's statements run under statementContext: the budget and ctx end the
// run between operations, not inside one.
func (m *sqlRuns) drive(ctx context.Context, run int, what string, k caseKey, p *sqlPathDB, l Load, op Op) (s Sample, ok bool, err error) {
	if m.failed[k] != nil {
		return Sample{}, false, nil
	}
	var st0 statsSnap
	l.Mark = func() { st0 = snap(p.db) }
	rctx, cancel := context.WithTimeout(ctx, m.budget)
	s, err = Drive(rctx, l, func(ctx context.Context, w int, rng *rand.Rand) error {
		return op(statementContext(ctx), w, rng)
	})
	cancel()
	st1 := snap(p.db)
	if err != nil {
		if ctx.Err() != nil {
			return s, false, ctx.Err()
		}
		if errors.Is(err, errRows) {
			return s, false, err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("a run took longer than %s", m.budget)
		}
		m.failed[k] = err
		m.rep.Notef("%s was dropped in run %d: %v", what, run, err)
		return s, false, nil
	}
	if m.splits[k] == nil {
		m.splits[k] = &tierSplit{}
	}
	m.splits[k].add(st1.stats.Sub(st0.stats), st1.pages-st0.pages, int64(len(s.Lat)))
	m.stats[k] = append(m.stats[k], s.Stats())
	return s, true, nil
}

// split is where case k's pages came from, nil if it was dropped.
func (m *sqlRuns) split(k caseKey) *tierSplit {
	if m.failed[k] != nil {
		return nil
	}
	return m.splits[k]
}

// summarize adds each case of keys that was measured and not dropped to
// the report, in the order of keys.
func (m *sqlRuns) summarize(keys []caseKey) {
	for _, k := range keys {
		if len(m.stats[k]) > 0 && m.failed[k] == nil {
			m.rep.Add(Summarize(m.rep.Suite, k.cs, k.path, k.threads, m.stats[k]))
		}
	}
}

// pagesTable writes a row of the tier table per case of keys not dropped,
// its leading cells from lead, and records the splits in metrics.csv.
func (m *sqlRuns) pagesTable(w *strings.Builder, keys []caseKey, lead func(caseKey) string) {
	for _, k := range keys {
		if sp := m.split(k); sp != nil {
			fmt.Fprintf(w, "%s%s\n", lead(k), sp.row(k.path == pathLocal))
			sp.metrics(m.rep, k.cs, k.path, k.threads)
		}
	}
}

// setHitRatios puts each chunkd path's tier shares over the cases not
// dropped in the environment block.
func (m *sqlRuns) setHitRatios(paths []string) {
	byPath := map[string]*tierSplit{}
	for k := range m.splits {
		if sp := m.split(k); sp != nil {
			if byPath[k.path] == nil {
				byPath[k.path] = &tierSplit{}
			}
			byPath[k.path].merge(sp)
		}
	}
	setHitRatios(m.rep, paths, byPath)
}

// statementContext is ctx without its cancellation, for the SQL suites'
// measured statements (drive checks ctx between operations, runSQLQuery
// between point lookups; one-off queries and preparation keep ctx). Under
// a context that can be canceled, database/sql watches each query from a
// goroutine of its own, whose wake-ups cost a local point lookup 10–300 µs
// over its 21 µs on our 2-core VM: noise of the harness on both sides of
// every ratio. A transaction also always reaches its COMMIT.
func statementContext(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
