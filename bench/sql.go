package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/gen"
	"github.com/dustin/go-humanize"
)

const sqlDBName = "sentences"

// sqlQuery is one query of the suite.
type sqlQuery struct {
	cs    string // the case
	title string
	sql   string
	each  bool // run once per id of the run's lookups (point lookups)
}

// sqlPath is one way to the pages, as the seed's table names it.
type sqlPath struct {
	name, title string
}

var sqlPaths = []sqlPath{
	{pathLocal, "local file"},
	{pathStoreDirect, "object store directly"},
	{pathCold, "cache service, cold"},
	{pathWarm, "cache service, warm"},
	{pathSameHost, "cache service, warm, same host"},
}

// sqlResult is one query run on one path.
type sqlResult struct {
	took  time.Duration // open and query, as the process would see it
	query time.Duration // the query part alone (point lookups: all of them)
	rows  int
	lats  []time.Duration // each point lookup
	// firstRow is the wall time from the open to the first row (point
	// lookups: the first lookup's).
	firstRow time.Duration
	stats    client.Stats
	pages    int64
	// cold: when the service had the appendix on disk, after the query
	// started; and its hedged store reads and hedges until then.
	fetched        time.Duration
	hreads, hedges float64
	// first and firstTook: the client's counters and the wall time from
	// the open to the end of the first point lookup.
	first     client.Stats
	firstTook time.Duration
}

// seedSet is the seed's data set at the run's scale (gen.Sentences, twice
// as many translations as sentences, seed 1) and its three queries.
type seedSet struct {
	ds                               *sqlDataset
	queries                          []sqlQuery
	sentences, translations, lookups int
}

// prepareSeed makes (or reuses) the seed's data set for r and names its
// queries: the seed join, point lookups (--count of them if given) and an
// aggregate.
func prepareSeed(ctx context.Context, r *Runner) (seedSet, error) {
	cfg := r.Config
	s := seedSet{sentences: pick(cfg.Scale, 10_000, 160_000, 1_250_000), lookups: pick(cfg.Scale, 20, 200, 1000)}
	s.translations = 2 * s.sentences
	if cfg.Count > 0 {
		s.lookups = cfg.Count
	}
	s.queries = []sqlQuery{
		{cs: "seed-join", title: "seed join", sql: gen.SeedQuery},
		{cs: "point-lookups", title: fmt.Sprintf("%d point lookups", s.lookups), sql: "SELECT Text FROM sentences WHERE SentenceId = ?", each: true},
		{cs: "aggregate", title: "aggregate", sql: "SELECT Lang, count(*) FROM sentences GROUP BY Lang"},
	}
	var err error
	s.ds, err = prepareSQLDataset(ctx, r, fmt.Sprintf("sentences-%d-%d.sqlite", s.sentences, s.translations), sqlDBName, cfg.rtt(), func(path string) error {
		return gen.Sentences(path, gen.SentencesOptions{Sentences: s.sentences, Translations: s.translations, Seed: 1})
	})
	return s, err
}

// runSQL is the seed article's measurement, generalised: SQL queries on
// a SQLite database through the local file, the object store directly,
// and the cache service cold and warm, each as a fresh process would run
// them ("chunkd sql"), wall time against the local file.
func runSQL(ctx context.Context, r *Runner) error {
	if r.Config.Bandwidth == 0 {
		// S3 streams about 100 MB/s a connection: without a cap a cold
		// service would download the appendix at the local disk's speed.
		r.Config.Bandwidth = 100 << 20
	}
	cfg, rep := r.Config, r.Report
	seed, err := prepareSeed(ctx, r)
	if err != nil {
		return err
	}
	ds, queries, sentences, translations, lookups := seed.ds, seed.queries, seed.sentences, seed.translations, seed.lookups
	defer ds.close()
	binary, how, err := serviceBinary(ctx, r)
	if err != nil {
		return err
	}
	rep.Env.Set("data set", "%s", ds.describe(fmt.Sprintf("gen.Sentences, %d sentences and %d translations, seed 1", sentences, translations)))
	rep.Env.Set("store", "local folder (file://) %s; the client (store-direct) and the service read it through %s", ds.storeDir, storeEmulation(cfg.rtt(), cfg.Bandwidth))
	rep.Env.Set("service", "%s; a new one per query and run, with an empty cache dir under %s", serviceArgsNote(r, binary, how), cfg.CacheDir)
	rep.Env.Set("client", "a new client and SQLite connection per query and run, as a new `chunkd sql` process would open: memory tier 256 MiB (empty), read-ahead 64 pages, SQLite's default page cache (2000 KiB); wall time from opening the client to the last row")
	var qs []string
	for _, q := range queries {
		qs = append(qs, fmt.Sprintf("%s: `%s`", q.title, strings.TrimSuffix(q.sql, ";")))
	}
	rep.Env.Set("queries", "%s", strings.Join(qs, "; "))

	m := &sqlMeasure{r: r, ds: ds, binary: binary, svcDir: filepath.Join(cfg.CacheDir, "chunkd-bench-sql"), results: sqlResults{}}
	for run := 1; run <= cfg.Runs; run++ {
		// The same random ids for every path of a run.
		rng := rand.New(rand.NewPCG(uint64(run), 0x5e1ec7))
		ids := make([]int64, lookups)
		for i := range ids {
			ids[i] = rng.Int64N(int64(sentences)) + 1
		}
		for _, q := range queries {
			if err := m.query(ctx, run, q, ids); err != nil {
				return err
			}
		}
	}
	reportSQL(rep, ds, queries, m.results)
	return nil
}

// sqlResults are the runs of each query on each path.
type sqlResults map[sqlKey][]sqlResult

type sqlKey struct{ cs, path string }

// sqlMeasure runs the sql suite's queries.
type sqlMeasure struct {
	r       *Runner
	ds      *sqlDataset
	binary  string // the service's
	svcDir  string // the service's cache dir
	results sqlResults
}

// query runs q once on every path, as run number run: the local file, the
// store directly, then a fresh service: the first query after its start,
// while it reads through and downloads; then, with the appendix on its
// disk, a fresh client again, over the service and on the same host.
func (m *sqlMeasure) query(ctx context.Context, run int, q sqlQuery, ids []int64) error {
	ds, cfg := m.ds, m.r.Config
	local, err := m.path(ctx, run, q, ids, pathLocal, 0, func() (*sqlDB, error) { return openLocalDB(ds.file, nil) })
	if err != nil {
		return err
	}
	if _, err := m.path(ctx, run, q, ids, pathStoreDirect, local.rows, func() (*sqlDB, error) {
		return openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, log: cfg.Log})
	}); err != nil {
		return err
	}
	svc, err := startSQLService(ctx, m.r, m.binary, ds.storeURL, m.svcDir)
	if err != nil {
		return err
	}
	viaService := func() (*sqlDB, error) {
		return openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, log: cfg.Log})
	}
	coldStart := time.Now()
	_, err = m.path(ctx, run, q, ids, pathCold, local.rows, viaService)
	if err == nil {
		if _, err = svc.waitAppendix(ctx, ds.db, 10*time.Minute); err == nil {
			k := sqlKey{q.cs, pathCold}
			res := &m.results[k][len(m.results[k])-1]
			res.fetched = time.Since(coldStart)
			if pm, err := scrapeMetrics(ctx, svc.hc, svc.url+"/metrics"); err == nil {
				res.hreads, res.hedges = pm["chunkd_store_hedged_reads_total"], pm["chunkd_store_hedges_total"]
			}
			_, err = m.path(ctx, run, q, ids, pathWarm, local.rows, viaService)
		}
		if err == nil {
			// Warm on the same host: the service has the version's page
			// image (a first same-host reader registered it; the service
			// filled it in the background).
			err = waitImage(ctx, ds, svc.url, m.svcDir, 10*time.Minute)
		}
		if err == nil {
			_, err = m.path(ctx, run, q, ids, pathSameHost, local.rows, func() (*sqlDB, error) {
				return openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, sameHost: true, log: cfg.Log})
			})
		}
	}
	if serr := svc.stop(cfg.Keep); err == nil && serr != nil {
		m.r.Report.Notef("A service did not stop cleanly: %v", serr)
	}
	if err != nil {
		return fmt.Errorf("%w\nservice log:\n%s", err, svc.tail(10))
	}
	return nil
}

// path runs q on one path, opened with open, and records the result; a
// path other than the local file must return wantRows rows.
func (m *sqlMeasure) path(ctx context.Context, run int, q sqlQuery, ids []int64, path string, wantRows int, open func() (*sqlDB, error)) (sqlResult, error) {
	res, err := runSQLQuery(ctx, q, ids, open)
	if err != nil {
		return res, fmt.Errorf("%s on %s, run %d: %w", q.cs, path, run, err)
	}
	if path != pathLocal && res.rows != wantRows {
		return res, fmt.Errorf("%s on %s, run %d: %d rows, the local file gave %d: %w", q.cs, path, run, res.rows, wantRows, errRows)
	}
	k := sqlKey{q.cs, path}
	m.results[k] = append(m.results[k], res)
	m.r.Logf("sql: run %d/%d %-13s %-17s %9s  %d rows", run, m.r.Config.Runs, q.cs, path, fmtWall(us(res.took)), res.rows)
	return res, nil
}

// reportSQL writes the results (one row per query and path, each run one
// operation), the seed's table, where the pages came from, and notes.
func reportSQL(rep *Report, ds *sqlDataset, queries []sqlQuery, results sqlResults) {
	for _, q := range queries {
		for _, p := range sqlPaths {
			var st, each []Stats
			for _, res := range results[sqlKey{q.cs, p.name}] {
				st = append(st, oneShot(res.took))
				if q.each {
					lat := sorted(res.lats)
					each = append(each, Sample{Lat: lat, Elapsed: res.query}.Stats())
					rep.Samples("point-lookup-each", p.name, 1, res.lats)
				}
			}
			rep.Add(Summarize("sql", q.cs, p.name, 1, st))
			if q.each {
				rep.Add(Summarize("sql", "point-lookup-each", p.name, 1, each))
			}
		}
	}
	rep.Intro = seedTables(rep, ds.rtt, queries, results)
	rep.Section("Where the pages came from", sqlTiers(rep, queries, results))
	for _, q := range queries {
		if q.each {
			rep.Section("A fresh process's first point lookup", firstLookup(rep, q, results))
		}
	}

	rep.Section("The cold path", coldPath(rep, ds, queries, results))
	if ds.bandwidth == 0 {
		rep.Notef("The emulated store adds a round trip to every request but no bandwidth limit (--bandwidth), so a cold service downloads the whole appendix file (%s) at the speed of the local disk: "+
			"the cold path is optimistic next to S3, which streams about 100 MB/s a connection.", humanize.IBytes(uint64(ds.imp.AppendixBytes)))
	}
	rep.Notef("Every path opens a new client and SQLite connection per query and run, so nothing is in the client's memory or SQLite's page cache at the start; the local file and the service's downloaded file are in the OS page cache (the file was just written).")
	rep.Notef("A new client of the service reads no manifest from the store: it asks the service for the root (at most its --manifest-ttl old) and the version's open set (root chunk, page map, page 1, interior pages) in one request each; the store round trip (%s) is paid only by the store-direct path and the service's own misses.", ds.rtt)
}

// coldPath is the section on the cold path: each query's time to its
// first row and to its end on the paths that start with nothing local,
// when the cold service had the appendix file on disk, and its hedges.
func coldPath(rep *Report, ds *sqlDataset, queries []sqlQuery, results sqlResults) string {
	var b strings.Builder
	fmt.Fprintf(&b, "A query's time to its first row and to its last (the open included), median over runs, on the paths that start with nothing local, against the local file and the store read directly in the same run. "+
		"For `service-cold`, a service just started with an empty cache dir: when it had the whole appendix file (%s) on its disk, verified, synced and renamed in, counted from the query's start; "+
		"and its store reads that could be hedged until then (ranged reads, streams opened, heads, gets) with the second requests it sent for slow ones.\n\n", humanize.IBytes(uint64(ds.imp.AppendixBytes)))
	b.WriteString("| query | path | first row | × local | query | × local | appendix on disk | store reads | hedges |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, q := range queries {
		med := func(path string, f func(sqlResult) float64) float64 {
			var xs []float64
			for _, r := range results[sqlKey{q.cs, path}] {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		firstOf := func(r sqlResult) float64 { return us(r.firstRow) }
		tookOf := func(r sqlResult) float64 { return us(r.took) }
		baseFirst, baseTook := med(pathLocal, firstOf), med(pathLocal, tookOf)
		for _, path := range []string{pathLocal, pathStoreDirect, pathCold} {
			if len(results[sqlKey{q.cs, path}]) == 0 {
				continue
			}
			first, took := med(path, firstOf), med(path, tookOf)
			rep.Metric(q.cs, path, 1, "first_row_us", first)
			onDisk, reads, hedges := "–", "–", "–"
			if path == pathCold {
				d := med(path, func(r sqlResult) float64 { return us(r.fetched) })
				rh := med(path, func(r sqlResult) float64 { return r.hreads })
				hh := med(path, func(r sqlResult) float64 { return r.hedges })
				onDisk, reads, hedges = fmtWall(d), fmt.Sprintf("%.0f", rh), fmt.Sprintf("%.0f", hh)
				if rh > 0 {
					hedges += fmt.Sprintf(" (%.1f%%)", 100*hh/rh)
				}
				rep.Metric(q.cs, path, 1, "appendix_on_disk_us", d)
				rep.Metric(q.cs, path, 1, "store_reads_hedgeable", rh)
				rep.Metric(q.cs, path, 1, "store_hedges", hh)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", q.cs, path, fmtWall(first), ratio(first, baseFirst), fmtWall(took), ratio(took, baseTook), onDisk, reads, hedges)
		}
	}
	return b.String()
}

// seedTables is the report's introduction: the paths, and the seed's
// table of wall time per path with the multiple of local's, with the
// open and without.
func seedTables(rep *Report, rtt time.Duration, queries []sqlQuery, results sqlResults) string {
	var b strings.Builder
	b.WriteString("Queries on a SQLite database of the seed's shape (Tatoeba-like sentences and translations), each run as a new `chunkd sql` process would: " +
		"open a client, read the manifest, root and page map, then run the query, all timed. Paths:\n\n" +
		"- `local`: the SQLite file on local disk (through the same VFS, page by page with pread; the file is in the OS page cache): the baseline.\n" +
		fmt.Sprintf("- `store-direct`: no service; the client reads the store itself, every request paying the emulated round trip (%s).\n", rtt) +
		"- `service-cold`: a `chunkd serve` just started with an empty cache dir: the first query after its start, while it reads through from the store and downloads the appendix file.\n" +
		"- `service-warm`: the same service once the appendix file is on its disk; a fresh client (nothing in its memory).\n" +
		"- `service-same-host`: the same warm service, and a fresh client on its host (`chunkd sql --service-dir`) that reads the version's pages from the service's page image (a pread and a CRC check per page) and no request (a page the image lacks: a pread of the service's verified file and a CRC).\n\n" +
		"Cases: `seed-join` is the seed article's query; `point-lookups` looks up random sentence ids one at a time (the same ids on every path of a run), timed as a whole; " +
		"`point-lookup-each` is the latency of each of those lookups (the first ones pay for the b-tree's upper pages); `aggregate` scans the sentences table. " +
		"In the case tables an operation is one run of a query as a whole (one lookup in `point-lookup-each`), so ops/s is runs (lookups) per second.\n\n")
	b.WriteString("**The seed's table** (wall time, median over runs; × is the multiple of the local file's):\n\n")
	writeSeedTable(&b, queries, func(cs, path string) float64 {
		res, ok := rep.find(cs, path, 1)
		if !ok {
			return 0
		}
		return res.P50US
	})
	b.WriteString("The same without the open (the query alone, after the client has read the manifest, root and page map; median over runs):\n\n")
	queryOnly := func(cs, path string) float64 {
		var xs []float64
		for _, res := range results[sqlKey{cs, path}] {
			xs = append(xs, us(res.query))
		}
		return median(xs)
	}
	writeSeedTable(&b, queries, queryOnly)
	for _, p := range sqlPaths {
		for _, q := range queries {
			if v := queryOnly(q.cs, p.name); v != 0 && queryOnly(q.cs, pathLocal) != 0 {
				rep.Metric(q.cs, p.name, 1, "query_only_us", v)
			}
		}
	}
	return b.String()
}

// writeSeedTable writes a table of the wall time of each query (from
// wall, in microseconds; 0 for none) on each path, with its multiple of
// the local file's.
func writeSeedTable(b *strings.Builder, queries []sqlQuery, wall func(cs, path string) float64) {
	b.WriteString("| path |")
	for _, q := range queries {
		fmt.Fprintf(b, " %s | × local |", q.title)
	}
	b.WriteString("\n|---|")
	for range queries {
		b.WriteString("--:|--:|")
	}
	b.WriteString("\n")
	for _, p := range sqlPaths {
		fmt.Fprintf(b, "| %s |", p.title)
		for _, q := range queries {
			v, base := wall(q.cs, p.name), wall(q.cs, pathLocal)
			if v == 0 || base == 0 {
				b.WriteString(" | |")
				continue
			}
			fmt.Fprintf(b, " %s | %s |", fmtWall(v), ratio(v, base))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// sqlTiers is the section on where each path's client read its pages:
// the last run's client counters, and medians of the figures over runs
// in metrics.csv.
func sqlTiers(rep *Report, queries []sqlQuery, results sqlResults) string {
	allSplits := map[string]*tierSplit{}
	var t strings.Builder
	t.WriteString("What each path's client read, and from where (the last run; client.Stats). Pages read are SQLite's page-cache misses, through the VFS.\n\n")
	t.WriteString("| query | path | wall time | pages read |" + strings.TrimPrefix(tierTableHeader, "| pages read per op | service requests per op |") + " service requests | store reads | store bytes read |\n")
	t.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, q := range queries {
		for _, p := range sqlPaths {
			rs := results[sqlKey{q.cs, p.name}]
			if len(rs) == 0 {
				continue
			}
			last := rs[len(rs)-1]
			var sp tierSplit
			sp.add(last.stats, last.pages, 1)
			if allSplits[p.name] == nil {
				allSplits[p.name] = &tierSplit{}
			}
			allSplits[p.name].merge(&sp)
			cells := sp.row(p.name == pathLocal)
			for range 2 { // drop pages and requests per op: one op, whose requests end the row
				cells = cells[strings.Index(cells, "|")+1:]
			}
			st := last.stats
			svcReq, stReq, stBytes := "–", "–", "–"
			if p.name != pathLocal {
				svcReq, stReq, stBytes = fmt.Sprint(st.Service.Requests), fmt.Sprint(st.Store.Requests), humanize.IBytes(uint64(st.StoreReadBytes))
			}
			fmt.Fprintf(&t, "| %s | %s | %s | %d |%s %s | %s | %s |\n", q.cs, p.name, fmtWall(us(last.took)), last.pages, cells, svcReq, stReq, stBytes)
			var pagesRuns, svcRuns, storeRuns []float64
			for _, x := range rs {
				pagesRuns = append(pagesRuns, float64(x.pages))
				svcRuns = append(svcRuns, float64(x.stats.Service.Requests))
				storeRuns = append(storeRuns, float64(x.stats.Store.Requests))
			}
			rep.Metric(q.cs, p.name, 1, "pages_read", median(pagesRuns))
			if p.name != pathLocal {
				rep.Metric(q.cs, p.name, 1, "service_requests", median(svcRuns))
				rep.Metric(q.cs, p.name, 1, "store_requests", median(storeRuns))
				sp.metrics(rep, q.cs, p.name, 1)
			}
		}
	}
	var names []string
	for _, p := range sqlPaths {
		names = append(names, p.name)
	}
	setHitRatios(rep, names, allSplits)
	t.WriteString("\nThe client's own summary, last run:\n\n")
	for _, q := range queries {
		for _, p := range sqlPaths[1:] {
			if rs := results[sqlKey{q.cs, p.name}]; len(rs) > 0 {
				fmt.Fprintf(&t, "- %s, %s: %s\n", q.cs, p.name, rs[len(rs)-1].stats)
			}
		}
	}
	return t.String()
}

// firstLookup is the section on the requests a fresh process makes from
// its open to the end of its first point lookup (the medians over runs).
func firstLookup(rep *Report, q sqlQuery, results sqlResults) string {
	var t strings.Builder
	t.WriteString("The requests a new client made from its open to the end of its first point lookup, and the wall time of both (median over runs). " +
		"The service's requests are made one after the other (the page image of the version by its root on the same host; else the open set, then pages); so are the store's manifest read, root chunk, page map levels and pages, while the store's index reads of one manifest run in parallel. " +
		"A same-host client reads the store's manifest and the service's local file indexes only once it must read a page the image lacks (in the background: no read waits on that). " +
		"So the round trips one after the other are the service's requests, the store's manifest reads and chunk reads, and one for its index reads if it made any (the last column); a service that reads through to the store itself (just started) adds its own, which the client does not see (they are in the wall time).\n\n")
	t.WriteString("| path | wall time | service requests | store: manifest reads | store: index reads | store: chunk reads | sequential round trips |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range sqlPaths[1:] {
		rs := results[sqlKey{q.cs, p.name}]
		if len(rs) == 0 {
			continue
		}
		var took, svc, man, idx, chunks []float64
		for _, r := range rs {
			took = append(took, float64(r.firstTook.Microseconds())/1000)
			svc = append(svc, float64(r.first.Service.Requests))
			man = append(man, float64(r.first.ManifestLoads))
			idx = append(idx, float64(r.first.TablesOpened))
			chunks = append(chunks, float64(r.first.Store.Requests))
		}
		seq := median(svc) + median(man) + min(median(idx), 1) + median(chunks)
		fmt.Fprintf(&t, "| %s | %.1f ms | %g | %g | %g | %g | %g |\n", p.name, median(took), median(svc), median(man), median(idx), median(chunks), seq)
		rep.Metric("first-lookup", p.name, 1, "service_requests", median(svc))
		rep.Metric("first-lookup", p.name, 1, "store_requests", median(man)+median(idx)+median(chunks))
		rep.Metric("first-lookup", p.name, 1, "sequential_round_trips", seq)
		rep.Metric("first-lookup", p.name, 1, "wall_ms", median(took))
	}
	return t.String()
}

// runSQLQuery opens the database with open and runs q (for point lookups,
// once per id), timing it all.
func runSQLQuery(ctx context.Context, q sqlQuery, ids []int64, open func() (*sqlDB, error)) (sqlResult, error) {
	var res sqlResult
	start := time.Now()
	d, err := open()
	if err != nil {
		return res, err
	}
	defer d.close()
	d.SetMaxOpenConns(1)
	qstart := time.Now()
	if q.each {
		st, err := d.PrepareContext(ctx, q.sql)
		if err != nil {
			return res, d.QueryError(err)
		}
		defer st.Close()
		res.lats = make([]time.Duration, 0, len(ids))
		sctx := statementContext(ctx)
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			t0 := time.Now()
			rows, err := st.QueryContext(sctx, id)
			if err != nil {
				return res, d.QueryError(err)
			}
			n, err := drain(rows)
			if err != nil {
				return res, d.QueryError(err)
			}
			res.lats = append(res.lats, time.Since(t0))
			res.rows += n
			if len(res.lats) == 1 {
				res.firstTook, res.first = time.Since(start), d.stats()
				res.firstRow = res.firstTook
			}
		}
	} else {
		rows, err := d.QueryContext(ctx, q.sql)
		if err != nil {
			return res, d.QueryError(err)
		}
		if res.rows, err = drainFirst(rows, func() { res.firstRow = time.Since(start) }); err != nil {
			return res, d.QueryError(err)
		}
	}
	res.took = time.Since(start)
	res.query = time.Since(qstart)
	res.stats = d.stats()
	res.pages = d.PageReads()
	return res, nil
}
