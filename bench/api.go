package bench

// The api suite: the query API of a "chunkd serve" child, from this
// process, against the local file in the same run: the seed's three
// queries, a small result from the result cache, and the title5
// transaction, each with the service's result cache off and on.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/sqlitevfs"
)

// Path names of the api suite.
const (
	pathAPI       = "api"        // the query API, result cache off
	pathAPICached = "api-cached" // the query API, result cache on and holding the answer
)

// title5PipeCase is title5 with each transaction's five statements sent
// at once on the thread's connection (HTTP/1.1 pipelining: they do not
// depend on each other), their answers read in order.
const title5PipeCase = "transaction-pipelined"

// t5Variant is one way the suite runs title5.
type t5Variant struct {
	cs, path string
}

// t5Variants are title5's variants, in the order each run measures them;
// the local file is measured once and is the baseline of both cases.
var t5Variants = []t5Variant{
	{title5Case, pathLocal}, {title5Case, pathAPI}, {title5Case, pathAPICached},
	{title5PipeCase, pathAPI}, {title5PipeCase, pathAPICached},
}

// apiGoals are the goals for the suite, as multiples and times.
const (
	goalSeedJoin     = 1.3    // seed join through the API, cache off: at most × the local file
	goalCachedP50US  = 300.0  // a cached small result: p50 at most (µs)
	goalCachedP95US  = 1300.0 // and p95 (Readyset's cached p95)
	goalTitle5Cached = 3.0    // title5 through the API with the cache, 8 clients: at least × local tps
)

// apiResultCache is the cache-on service's --results: room for every
// answer the suite reads, so that the cached path measures hits.
const apiResultCache = "2GiB"

// apiClient sends one service's query API GETs for one database.
type apiClient struct {
	hc   *http.Client
	base string // …/v1/dbs/DB/query?
	svc  *sqlService
	bufs sync.Pool
}

func newAPIClient(svc *sqlService, db string, conns int) *apiClient {
	return &apiClient{
		hc:   &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}},
		base: svc.url + api.QueryPath(db) + "?",
		svc:  svc,
		bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// apiAnswer is what the suite reads of an answer.
type apiAnswer struct {
	rows  int
	cache string // Chunkd-Result-Cache
}

// query is the escaped query string of a statement: sql=…, with its
// parameters (params=…) appended per call.
func apiQuery(sql string) string { return "sql=" + url.QueryEscape(sql) }

// get runs q (an apiQuery) with the JSON parameters params ("" none) and
// reads the whole answer.
func (c *apiClient) get(ctx context.Context, q, params string) (apiAnswer, error) {
	u := c.base + q
	if params != "" {
		u += "&params=" + url.QueryEscape(params)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return apiAnswer{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return apiAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiAnswer{}, api.ReadError(resp)
	}
	buf := c.bufs.Get().(*bytes.Buffer)
	defer c.bufs.Put(buf)
	buf.Reset()
	if _, err := io.Copy(buf, resp.Body); err != nil {
		return apiAnswer{}, err
	}
	n, err := rowCount(buf.Bytes())
	return apiAnswer{rows: n, cache: resp.Header.Get(api.HeaderResultCache)}, err
}

// rowCount reads a JSON answer's row_count (the body has been read
// whole: a count without its rows would be a cut answer, which JSON's
// trailer guards against).
func rowCount(body []byte) (int, error) {
	i := bytes.LastIndex(body, []byte(`"row_count":`))
	if i < 0 {
		return 0, fmt.Errorf("an answer without row_count: %.200s", body)
	}
	rest := body[i+len(`"row_count":`):]
	j := bytes.IndexByte(rest, ',')
	if j < 0 {
		return 0, fmt.Errorf("a bad answer end: %.200s", rest)
	}
	return strconv.Atoi(string(rest[:j]))
}

// pipeConn is one kept-alive HTTP/1.1 connection on which a batch of
// GETs goes out in one write and their answers are read in order
// (pipelining; net/http's client sends one request at a time).
type pipeConn struct {
	nc   net.Conn
	br   *bufio.Reader
	host string
	out  []byte
	body bytes.Buffer
}

func dialPipe(ctx context.Context, svcURL string) (*pipeConn, error) {
	u, err := url.Parse(svcURL)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	return &pipeConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), host: u.Host}, nil
}

func (p *pipeConn) close() { p.nc.Close() }

// getAll sends GETs of targets (paths with their queries) at once and
// reads every answer; it returns the rows of them all and how many the
// result cache answered.
func (p *pipeConn) getAll(targets []string) (rows, hits int, err error) {
	p.out = p.out[:0]
	for _, t := range targets {
		p.out = append(p.out, "GET "...)
		p.out = append(p.out, t...)
		p.out = append(p.out, " HTTP/1.1\r\nHost: "...)
		p.out = append(p.out, p.host...)
		p.out = append(p.out, "\r\n\r\n"...)
	}
	if _, err := p.nc.Write(p.out); err != nil {
		return 0, 0, err
	}
	for range targets {
		resp, err := http.ReadResponse(p.br, nil)
		if err != nil {
			return 0, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			e := api.ReadError(resp)
			resp.Body.Close()
			return 0, 0, e
		}
		p.body.Reset()
		_, err = io.Copy(&p.body, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		n, err := rowCount(p.body.Bytes())
		if err != nil {
			return 0, 0, err
		}
		rows += n
		if resp.Header.Get(api.HeaderResultCache) == "hit" {
			hits++
		}
	}
	return rows, hits, nil
}

// stringParam is a JSON array of one string: a query's parameters.
func stringParam(s string) string {
	b, _ := json.Marshal([]string{s})
	return string(b)
}

// runAPI is the suite.
func runAPI(ctx context.Context, r *Runner) error {
	binary, how, err := serviceBinary(ctx, r)
	if err != nil {
		return err
	}
	r.Report.Env.Set("services", "two child processes `%s serve` (%s) per data set over the same store, on loopback HTTP, gRPC off: `api` with --results 0 (the result cache off), `api-cached` with --results %s; both warmed (the appendix file on disk, the version's page image filled) before measuring; clients in the bench process, over HTTP keep-alive",
		binary, how, apiResultCache)
	m := &apiMeasure{r: r, binary: binary}
	if err := m.seed(ctx); err != nil {
		return err
	}
	if err := m.title5(ctx); err != nil {
		return err
	}
	m.report()
	return nil
}

// apiMeasure holds what the suite measured.
type apiMeasure struct {
	r      *Runner
	binary string
	// seed's queries: wall times per path, and where the time went.
	seedQueries []sqlQuery
	seedRuns    map[sqlKey][]time.Duration
	seedRows    map[string]int
	// the cached small result, and the title5 transaction
	small    map[caseKey][]Stats
	smallCPU map[caseKey]*cpuSplit
	t5       map[caseKey][]Stats
	t5failed map[caseKey]error
	t5cpu    map[caseKey]*cpuSplit
	t5hits   map[caseKey][2]float64 // hits, answers
	threads  []int
	notes    []string
}

// cpuSplit is CPU time spent per operation by the client (this process)
// and the service.
type cpuSplit struct {
	ops               int64
	client, service   time.Duration
	handler, handlerN float64 // the service's query handler time (s), and its requests
}

func (c *cpuSplit) perOp() (clientUS, serviceUS, handlerUS float64) {
	if c.ops == 0 {
		return 0, 0, 0
	}
	n := float64(c.ops)
	if c.handlerN > 0 {
		handlerUS = c.handler / c.handlerN * 1e6
	}
	return float64(c.client.Microseconds()) / n, float64(c.service.Microseconds()) / n, handlerUS
}

// cpuMark reads this process's and the service's CPU time and the
// service's query handler counters, to subtract.
type cpuMark struct {
	client, service time.Duration
	handler, n      float64
	hits, answers   float64
}

func markCPU(ctx context.Context, svc *sqlService) cpuMark {
	var m cpuMark
	m.client, _ = processCPU("self")
	m.service, _ = processCPU(svc.pid)
	if p, err := scrapeMetrics(ctx, svc.hc, svc.url+"/metrics"); err == nil {
		m.handler = p[`chunkd_request_duration_seconds_sum{api="http_query"}`]
		m.n = p[`chunkd_request_duration_seconds_count{api="http_query"}`]
		m.hits = p[`chunkd_query_results_total{result="hit"}`]
		m.answers = m.hits + p[`chunkd_query_results_total{result="miss"}`] + p[`chunkd_query_results_total{result="off"}`]
	}
	return m
}

func (a cpuMark) sub(b cpuMark, ops int64) *cpuSplit {
	return &cpuSplit{ops: ops, client: a.client - b.client, service: a.service - b.service, handler: a.handler - b.handler, handlerN: a.n - b.n}
}

func (c *cpuSplit) add(o *cpuSplit) {
	c.ops += o.ops
	c.client += o.client
	c.service += o.service
	c.handler += o.handler
	c.handlerN += o.handlerN
}

// seed measures the seed's three queries on the local file and through
// the API with the cache off and on, alternating paths within each run,
// and a small cached result's latency.
func (m *apiMeasure) seed(ctx context.Context) error {
	r := m.r
	cfg := r.Config
	seed, err := prepareSeed(ctx, r)
	if err != nil {
		return err
	}
	ds, sentences, translations, lookups := seed.ds, seed.sentences, seed.translations, seed.lookups
	m.seedQueries = seed.queries
	defer ds.close()
	r.Report.Env.Set("store", "local folders (file://) under %s, one a data set, which the services read through %s", r.WorkDir, storeEmulation(cfg.rtt(), cfg.Bandwidth))
	r.Report.Env.Set("data set (seed's queries)", "%s", ds.describe(fmt.Sprintf("gen.Sentences, %d sentences and %d translations, seed 1", sentences, translations)))
	off, on, err := m.services(ctx, ds, "seed")
	if err != nil {
		return err
	}
	defer off.stop(cfg.Keep)
	defer on.stop(cfg.Keep)

	m.seedRuns, m.seedRows = map[sqlKey][]time.Duration{}, map[string]int{}
	for _, q := range m.seedQueries { // the versions opened, and the cached path's answers in its cache
		for _, svc := range []*sqlService{off, on} {
			if _, _, err := m.apiSeedQuery(ctx, svc, q, []int64{1}); err != nil {
				return fmt.Errorf("%s through the API: %w", q.cs, err)
			}
		}
	}
	for run := 1; run <= cfg.Runs; run++ {
		rng := rand.New(rand.NewPCG(uint64(run), 0x5e1ec7))
		ids := make([]int64, lookups)
		for i := range ids {
			ids[i] = rng.Int64N(int64(sentences)) + 1
		}
		if run == 1 { // the cached path's lookups of every run are in its cache
			c := newAPIClient(on, ds.db, 1)
			for runK := 1; runK <= cfg.Runs; runK++ {
				rk := rand.New(rand.NewPCG(uint64(runK), 0x5e1ec7))
				for range lookups {
					if _, err := c.get(ctx, apiQuery(m.seedQueries[1].sql), fmt.Sprintf("[%d]", rk.Int64N(int64(sentences))+1)); err != nil {
						return err
					}
				}
			}
			c.close()
		}
		for _, q := range m.seedQueries {
			local, err := runSQLQuery(ctx, q, ids, func() (*sqlDB, error) { return openLocalDB(ds.file, nil) })
			if err != nil {
				return fmt.Errorf("%s on the local file: %w", q.cs, err)
			}
			m.seedRuns[sqlKey{q.cs, pathLocal}] = append(m.seedRuns[sqlKey{q.cs, pathLocal}], local.took)
			m.seedRows[q.cs] = local.rows
			for _, p := range []struct {
				name string
				svc  *sqlService
			}{{pathAPI, off}, {pathAPICached, on}} {
				took, ans, err := m.apiSeedQuery(ctx, p.svc, q, ids)
				if err != nil {
					return fmt.Errorf("%s through %s, run %d: %w", q.cs, p.name, run, err)
				}
				if ans.rows != local.rows {
					return fmt.Errorf("%s through %s, run %d: %d rows, the local file gave %d: %w", q.cs, p.name, run, ans.rows, local.rows, errRows)
				}
				if want := map[string]string{pathAPI: "off", pathAPICached: "hit"}[p.name]; ans.cache != want {
					m.notes = append(m.notes, fmt.Sprintf("%s through %s, run %d: the result cache said %q, not %q", q.cs, p.name, run, ans.cache, want))
				}
				k := sqlKey{q.cs, p.name}
				m.seedRuns[k] = append(m.seedRuns[k], took)
				r.Logf("api: run %d/%d %-13s %-10s %9s (local %s)", run, cfg.Runs, q.cs, p.name, fmtWall(us(took)), fmtWall(us(local.took)))
			}
		}
	}
	return m.smallResult(ctx, ds, off, on, sentences)
}

// services starts the cache-off and cache-on services over ds, warm.
func (m *apiMeasure) services(ctx context.Context, ds *sqlDataset, name string) (off, on *sqlService, err error) {
	r := m.r
	r.Logf("api: starting the services (result cache off and on) over %s and downloading the database", ds.db)
	off, _, err = warmService(ctx, r, m.binary, ds, filepath.Join(r.Config.CacheDir, "chunkd-bench-api-off-"+name), "--results", "0")
	if err != nil {
		return nil, nil, err
	}
	on, _, err = warmService(ctx, r, m.binary, ds, filepath.Join(r.Config.CacheDir, "chunkd-bench-api-on-"+name), "--results", apiResultCache)
	if err != nil {
		off.stop(false)
		return nil, nil, err
	}
	return off, on, nil
}

// apiSeedQuery runs q through svc's API as a new process would (a new
// HTTP client and connection), each id of a point lookup a request, and
// returns the wall time and the last answer (its rows summed).
func (m *apiMeasure) apiSeedQuery(ctx context.Context, svc *sqlService, q sqlQuery, ids []int64) (time.Duration, apiAnswer, error) {
	c := newAPIClient(svc, sqlDBName, 1)
	defer c.close()
	query := apiQuery(q.sql)
	start := time.Now()
	if !q.each {
		ans, err := c.get(ctx, query, "")
		return time.Since(start), ans, err
	}
	var total apiAnswer
	for _, id := range ids {
		ans, err := c.get(ctx, query, "["+strconv.FormatInt(id, 10)+"]")
		if err != nil {
			return 0, total, err
		}
		total.rows += ans.rows
		total.cache = ans.cache
	}
	return time.Since(start), total, nil
}

// smallResult measures a small answer (one row: a point lookup among a
// thousand ids) at 1 and 8 clients in a closed loop: on a local
// connection kept open, through the API with the cache off (run each
// time), and from the result cache (which holds all thousand).
func (m *apiMeasure) smallResult(ctx context.Context, ds *sqlDataset, off, on *sqlService, sentences int) error {
	cfg := m.r.Config
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 50*time.Millisecond, time.Second, 2*time.Second),
		Duration: pick(cfg.Scale, 200*time.Millisecond, 3*time.Second, 10*time.Second),
		MinCount: pick(cfg.Scale, 20, 200, 1000),
	})
	m.small = map[caseKey][]Stats{}
	m.smallCPU = map[caseKey]*cpuSplit{}
	lookup := m.seedQueries[1].sql
	q := apiQuery(lookup)
	rng := rand.New(rand.NewPCG(7, 7))
	params := make([]string, 1000)
	for i := range params {
		params[i] = "[" + strconv.FormatInt(rng.Int64N(int64(sentences))+1, 10) + "]"
	}
	c := newAPIClient(on, ds.db, 1)
	for _, p := range params {
		if _, err := c.get(ctx, q, p); err != nil {
			return err
		}
	}
	c.close()
	local, err := openLocalDB(ds.file, nil)
	if err != nil {
		return err
	}
	defer local.close()
	local.SetMaxOpenConns(8)
	local.SetMaxIdleConns(8)
	for run := 1; run <= cfg.Runs; run++ {
		for _, clients := range []int{1, 8} {
			for _, path := range []string{pathLocal, pathAPI, pathAPICached} {
				k := caseKey{"small-result", path, clients}
				l := load
				l.Clients = clients
				var op Op
				var svc *sqlService
				closeOp := func() {}
				var wrong atomic.Int64
				switch path {
				case pathLocal:
					stmt, err := local.PrepareContext(ctx, lookup)
					if err != nil {
						return err
					}
					closeOp = func() { stmt.Close() }
					op = func(ctx context.Context, _ int, rng *rand.Rand) error {
						var text string
						id, _ := strconv.ParseInt(strings.Trim(params[rng.IntN(len(params))], "[]"), 10, 64)
						return stmt.QueryRowContext(statementContext(ctx), id).Scan(&text)
					}
				default:
					want := "off"
					svc = off
					if path == pathAPICached {
						svc, want = on, "hit"
					}
					c := newAPIClient(svc, ds.db, clients)
					closeOp = c.close
					op = func(ctx context.Context, _ int, rng *rand.Rand) error {
						ans, err := c.get(ctx, q, params[rng.IntN(len(params))])
						if err == nil && (ans.cache != want || ans.rows != 1) {
							wrong.Add(1)
						}
						return err
					}
				}
				var mark cpuMark
				l.Mark = func() {
					if svc != nil {
						mark = markCPU(ctx, svc)
					}
				}
				s, err := Drive(ctx, l, op)
				closeOp()
				if err != nil {
					return fmt.Errorf("small result on %s, %d clients: %w", path, clients, err)
				}
				if n := wrong.Load(); n > 0 {
					m.notes = append(m.notes, fmt.Sprintf("small result on %s, %d clients, run %d: %d answers were not one row with the result cache's expected state", path, clients, run, n))
				}
				x := s.Stats()
				m.small[k] = append(m.small[k], x)
				if svc != nil {
					after := markCPU(ctx, svc)
					if m.smallCPU[k] == nil {
						m.smallCPU[k] = &cpuSplit{}
					}
					m.smallCPU[k].add(after.sub(mark, x.Count))
				}
				if run == 1 && clients == 1 {
					m.r.Report.Samples("small-result", path, 1, s.Lat)
				}
				m.r.Logf("api: run %d/%d small result %-10s %d clients: p50 %s ms, p95 %s ms, %s ops/s", run, cfg.Runs, path, clients, fmtMS(us(x.P50)), fmtMS(us(x.P95)), fmtRate(x.Throughput))
			}
		}
	}
	return nil
}

// title5 measures the title5 transaction on the local file and through
// the API, cache off and on (its every answer in the cache first).
func (m *apiMeasure) title5(ctx context.Context) error {
	r := m.r
	cfg := r.Config
	titles := pick(cfg.Scale, 2_000, 35_000, 500_000)
	m.threads = cfg.clients([]int{1, 2}, []int{1, 8}, []int{1, 8})
	maxThreads := 1
	for _, th := range m.threads {
		maxThreads = max(maxThreads, th)
	}
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 30*time.Millisecond, time.Second, 5*time.Second),
		Duration: pick(cfg.Scale, 150*time.Millisecond, 3*time.Second, 15*time.Second),
		MinCount: pick(cfg.Scale, 4, 20, 100),
	})
	budget := max(pick(cfg.Scale, 20*time.Second, 2*time.Minute, 10*time.Minute), 10*(load.Warmup+load.Duration))
	ds, err := prepareSQLDataset(ctx, r, fmt.Sprintf("imdb-%d.sqlite", titles), title5DBName, cfg.rtt(), func(path string) error {
		return gen.IMDb(path, gen.IMDbOptions{Titles: titles, Seed: 1})
	})
	if err != nil {
		return err
	}
	defer ds.close()
	movies, err := movieTitles(ctx, ds.file)
	if err != nil {
		return err
	}
	r.Report.Env.Set("data set (title5)", "%s; %d movies, %d distinct movie titles, drawn uniformly per transaction", ds.describe(fmt.Sprintf("gen.IMDb: %d titles, seed 1", titles)), movies.count, len(movies.titles))
	r.Report.Env.Set("title5 timing", "per path, thread count and run: warm-up %s, then %s; runs outermost, then thread counts, then paths", load.Warmup, describeLoad(load))
	off, on, err := m.services(ctx, ds, "title5")
	if err != nil {
		return err
	}
	defer off.stop(cfg.Keep)
	defer on.stop(cfg.Keep)

	local, err := openLocalDB(ds.file, &sqlitevfs.Options{CacheKiB: title5CacheKiB})
	if err != nil {
		return err
	}
	defer local.close()
	local.SetMaxOpenConns(maxThreads)
	local.SetMaxIdleConns(maxThreads)
	queries := make([]string, len(title5Queries))
	for i, q := range title5Queries {
		queries[i] = apiQuery(q.sql)
	}
	// Every answer of the cached path in its cache, as a cache that has
	// run a while holds them (the titles are drawn uniformly: no hot set).
	r.Logf("api: title5: putting the answers of all %d movie titles (%d queries) in the cache-on service's result cache", len(movies.titles), 5*len(movies.titles))
	start := time.Now()
	prime := newAPIClient(on, ds.db, maxThreads)
	var next atomic.Int64
	primeErr := make(chan error, maxThreads)
	for range maxThreads {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(movies.titles) {
					primeErr <- nil
					return
				}
				p := stringParam(movies.titles[i])
				for _, q := range queries {
					if _, err := prime.get(ctx, q, p); err != nil {
						primeErr <- err
						return
					}
				}
			}
		}()
	}
	for range maxThreads {
		if err := <-primeErr; err != nil {
			return fmt.Errorf("title5: filling the result cache: %w", err)
		}
	}
	prime.close()
	r.Logf("api: title5: the result cache filled in %s", time.Since(start).Round(time.Millisecond))
	if p, err := scrapeMetrics(ctx, on.hc, on.url+"/metrics"); err == nil {
		r.Report.Env.Set("title5 result cache", "%d answers, %s, filled in %s before measuring (every statement of every movie title)",
			int64(p["chunkd_result_cache_entries"]), fmtBytes(p["chunkd_result_cache_bytes"]), time.Since(start).Round(time.Second))
	}

	m.t5, m.t5failed = map[caseKey][]Stats{}, map[caseKey]error{}
	m.t5cpu, m.t5hits = map[caseKey]*cpuSplit{}, map[caseKey][2]float64{}
	for run := 1; run <= cfg.Runs; run++ {
		for _, th := range m.threads {
			for _, vr := range t5Variants {
				p := vr.path
				k := caseKey{vr.cs, p, th}
				if m.t5failed[k] != nil {
					continue
				}
				l := load
				l.Clients = th
				var op Op
				var svc *sqlService
				var closeOp func()
				switch {
				case p == pathLocal:
					conns, err := t5Conns(ctx, local, th)
					if err != nil {
						return err
					}
					closeOp = func() {
						for _, c := range conns {
							c.close()
						}
					}
					op = func(ctx context.Context, w int, rng *rand.Rand) error {
						title := movies.titles[rng.IntN(len(movies.titles))]
						n, err := conns[w].tx(ctx, title)
						if err != nil {
							return local.QueryError(err)
						}
						if n == 0 {
							return fmt.Errorf("no rows for movie %q: %w", title, errRows)
						}
						return nil
					}
				case vr.cs == title5PipeCase:
					svc = off
					if p == pathAPICached {
						svc = on
					}
					conns := make([]*pipeConn, th)
					for i := range conns {
						if conns[i], err = dialPipe(ctx, svc.url); err != nil {
							return err
						}
					}
					closeOp = func() {
						for _, c := range conns {
							c.close()
						}
					}
					base := api.QueryPath(ds.db) + "?"
					targets := make([][]string, th)
					op = func(ctx context.Context, w int, rng *rand.Rand) error {
						title := movies.titles[rng.IntN(len(movies.titles))]
						param := "&params=" + url.QueryEscape(stringParam(title))
						t := targets[w][:0]
						for _, q := range queries {
							t = append(t, base+q+param)
						}
						targets[w] = t
						n, _, err := conns[w].getAll(t)
						if err != nil {
							return err
						}
						if n == 0 {
							return fmt.Errorf("no rows for movie %q: %w", title, errRows)
						}
						return nil
					}
				default:
					svc = off
					if p == pathAPICached {
						svc = on
					}
					c := newAPIClient(svc, ds.db, th)
					closeOp = c.close
					op = func(ctx context.Context, w int, rng *rand.Rand) error {
						title := movies.titles[rng.IntN(len(movies.titles))]
						param := stringParam(title)
						n := 0
						for _, q := range queries {
							ans, err := c.get(ctx, q, param)
							if err != nil {
								return err
							}
							n += ans.rows
						}
						if n == 0 {
							return fmt.Errorf("no rows for movie %q: %w", title, errRows)
						}
						return nil
					}
				}
				var mark cpuMark
				l.Mark = func() {
					if svc != nil {
						mark = markCPU(ctx, svc)
					}
				}
				rctx, cancel := context.WithTimeout(ctx, budget)
				s, err := Drive(rctx, l, func(ctx context.Context, w int, rng *rand.Rand) error {
					return op(statementContext(ctx), w, rng)
				})
				cancel()
				closeOp()
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, errRows) {
						return err
					}
					if errors.Is(err, context.DeadlineExceeded) {
						err = fmt.Errorf("a run took longer than %s", budget)
					}
					m.t5failed[k] = err
					r.Report.Notef("title5 (%s) on %s with %d threads was dropped in run %d: %v", vr.cs, p, th, run, err)
					continue
				}
				x := s.Stats()
				m.t5[k] = append(m.t5[k], x)
				if p == pathLocal { // the baseline of the pipelined case too
					pk := caseKey{title5PipeCase, p, th}
					m.t5[pk] = append(m.t5[pk], x)
				}
				if svc != nil {
					after := markCPU(ctx, svc)
					if m.t5cpu[k] == nil {
						m.t5cpu[k] = &cpuSplit{}
					}
					m.t5cpu[k].add(after.sub(mark, x.Count))
					h := m.t5hits[k]
					m.t5hits[k] = [2]float64{h[0] + after.hits - mark.hits, h[1] + after.answers - mark.answers}
				}
				if th == m.threads[0] {
					r.Report.Samples(vr.cs, p, th, s.Lat)
				}
				r.Logf("api: title5 run %d/%d %-21s %-10s %2d threads: %s tps, avg %s ms, p95 %s ms", run, cfg.Runs, vr.cs, p, th, fmtRate(x.Throughput), fmtMS(us(x.Mean)), fmtMS(us(x.P95)))
			}
		}
	}
	return nil
}

// fmtBytes renders a byte count.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", b/(1<<10))
}

// report writes the tables, the goals and where the time goes.
func (m *apiMeasure) report() {
	rep := m.r.Report
	var b strings.Builder
	b.WriteString("The query API of `chunkd serve` (a child process) from this process, against SQLite on the local file in the same run. Paths:\n\n" +
		"- `local`: the SQLite file through the same VFS (pread a page; the file in the OS page cache): the baseline.\n" +
		"- `api`: the query API with the result cache off (`--results 0`): every request runs its statement on the service, on a connection of the version's pool, reading the version's page image.\n" +
		"- `api-cached`: the query API with the result cache on, holding the answers (filled before measuring): every request is a cache hit.\n" +
		"\nTitle5 runs through the API twice: one request at a time (Go's net/http client), and *pipelined*: each transaction's five statements sent at once on the thread's connection and their answers read in order (HTTP/1.1 pipelining: the statements do not depend on each other).\n\n")

	// The seed's queries.
	b.WriteString("**The seed's queries** (wall time, median over runs; × is the multiple of the local file's). The local file is opened for each query, as a new `chunkd sql --file` process would; the API is asked by a new HTTP client (a new connection) per query, point lookups one request each on one connection:\n\n")
	b.WriteString("| path |")
	for _, q := range m.seedQueries {
		fmt.Fprintf(&b, " %s | × local |", q.title)
	}
	b.WriteString("\n|---|")
	for range m.seedQueries {
		b.WriteString("--:|--:|")
	}
	b.WriteString("\n")
	wall := func(cs, path string) float64 {
		var xs []float64
		for _, d := range m.seedRuns[sqlKey{cs, path}] {
			xs = append(xs, us(d))
		}
		return median(xs)
	}
	for _, p := range []string{pathLocal, pathAPI, pathAPICached} {
		fmt.Fprintf(&b, "| %s |", p)
		for _, q := range m.seedQueries {
			v, base := wall(q.cs, p), wall(q.cs, pathLocal)
			fmt.Fprintf(&b, " %s | %s |", fmtWall(v), ratio(v, base))
			var st []Stats
			for _, d := range m.seedRuns[sqlKey{q.cs, p}] {
				st = append(st, oneShot(d))
			}
			rep.Add(Summarize("api", q.cs, p, 1, st))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")

	// The small result.
	b.WriteString("**A small result** (a point lookup's one row, its id drawn from a thousand; 1 and 8 clients in a closed loop: the local file on connections kept open with the statement prepared, the API over kept-alive connections, the cached path's thousand answers in its cache):\n\n")
	b.WriteString("| clients | path | p50 ms | p95 ms | p99 ms | ops/s | client CPU µs/op | service CPU µs/op | service handler µs/op |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range []int{1, 8} {
		for _, p := range []string{pathLocal, pathAPI, pathAPICached} {
			k := caseKey{"small-result", p, c}
			res := Summarize("api", k.cs, p, c, m.small[k])
			rep.Add(res)
			cpu := "– | – | –"
			if sp := m.smallCPU[k]; sp != nil {
				cu, su, hu := sp.perOp()
				cpu = fmt.Sprintf("%.0f | %.0f | %.0f", cu, su, hu)
				rep.Metric(k.cs, p, c, "client_cpu_us_per_op", cu)
				rep.Metric(k.cs, p, c, "service_cpu_us_per_op", su)
				rep.Metric(k.cs, p, c, "service_handler_us_per_op", hu)
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", c, p, fmtMS(res.P50US), fmtMS(res.P95US), fmtMS(res.P99US), fmtRate(res.Throughput), cpu)
		}
	}
	b.WriteString("\n")

	// title5.
	var keys []caseKey
	for _, cs := range []string{title5Case, title5PipeCase} {
		for _, p := range []string{pathLocal, pathAPI, pathAPICached} {
			for _, th := range m.threads {
				keys = append(keys, caseKey{cs, p, th})
			}
		}
	}
	for _, k := range keys {
		if len(m.t5[k]) > 0 && m.t5failed[k] == nil {
			rep.Add(Summarize("api", k.cs, k.path, k.threads, m.t5[k]))
		}
	}
	b.WriteString("**title5** (the 5-SELECT transaction; through the API each statement is a request, the title its parameter):\n\n")
	b.WriteString("| threads | path | tps | avg ms | p95 ms | tps × local | client CPU µs/tx | service CPU µs/tx | service handler µs/request | result-cache hits |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, th := range m.threads {
		base, bok := rep.find(title5Case, pathLocal, th)
		for _, vr := range t5Variants {
			p := vr.path
			res, ok := rep.find(vr.cs, p, th)
			if !ok {
				continue
			}
			tx := ""
			if bok {
				tx = ratio(res.Throughput, base.Throughput)
			}
			cpu := "– | – | –"
			hits := "–"
			if c := m.t5cpu[caseKey{vr.cs, p, th}]; c != nil {
				cu, su, hu := c.perOp()
				cpu = fmt.Sprintf("%.0f | %.0f | %.0f", cu, su, hu)
				rep.Metric(vr.cs, p, th, "client_cpu_us_per_tx", cu)
				rep.Metric(vr.cs, p, th, "service_cpu_us_per_tx", su)
				rep.Metric(vr.cs, p, th, "service_handler_us_per_request", hu)
				if h := m.t5hits[caseKey{vr.cs, p, th}]; h[1] > 0 {
					hits = fmt.Sprintf("%.1f%%", h[0]/h[1]*100)
					rep.Metric(vr.cs, p, th, "result_cache_hit_ratio", h[0]/h[1])
				}
			}
			name := p
			if vr.cs == title5PipeCase {
				name += ", pipelined"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", th, name, fmtRate(res.Throughput), fmtMS(res.MeanUS), fmtMS(res.P95US), tx, cpu, hits)
		}
	}
	b.WriteString("\n")
	rep.Intro = b.String()

	rep.Section("Goals", m.goals())
	rep.Notef("Clients, services and SQLite share this machine's %d cores: CPU per operation is what bounds throughput at 8 clients. CPU is read from /proc (10 ms ticks) over each measured part; the service handler time is the mean of chunkd_request_duration_seconds{api=\"http_query\"} over the same part (from the request's routing to its last byte written).", rep.Env.Cores)
	for _, n := range m.notes {
		rep.Notef("%s", n)
	}
}

// goals is the goals section: each goal, the figure, and by how much it
// is met or missed.
func (m *apiMeasure) goals() string {
	rep := m.r.Report
	var b strings.Builder
	b.WriteString("| goal | measured | met? |\n|---|--:|---|\n")
	seed, okS := rep.find("seed-join", pathAPI, 1)
	local, okL := rep.find("seed-join", pathLocal, 1)
	if okS && okL && local.P50US > 0 {
		x := seed.P50US / local.P50US
		fmt.Fprintf(&b, "| seed join through the API, cache off: ≤ %.1f× the local file | %.2f× (%s against %s) | %s |\n", goalSeedJoin, x, fmtWall(seed.P50US), fmtWall(local.P50US), metBy(x <= goalSeedJoin, x/goalSeedJoin))
		rep.Metric("seed-join", pathAPI, 1, "x_local", x)
	}
	if c, ok := rep.find("small-result", pathAPICached, 1); ok {
		fmt.Fprintf(&b, "| a cached small result, 1 client: p50 ≤ %.1f ms | %s ms | %s |\n", goalCachedP50US/1000, fmtMS(c.P50US), metBy(c.P50US <= goalCachedP50US, c.P50US/goalCachedP50US))
		fmt.Fprintf(&b, "| a cached small result, 1 client: p95 ≤ %.1f ms | %s ms | %s |\n", goalCachedP95US/1000, fmtMS(c.P95US), metBy(c.P95US <= goalCachedP95US, c.P95US/goalCachedP95US))
	}
	for _, th := range m.threads {
		if th != 8 {
			continue
		}
		l, okL := rep.find(title5Case, pathLocal, th)
		for _, cs := range []string{title5Case, title5PipeCase} {
			a, okA := rep.find(cs, pathAPICached, th)
			if okA && okL && l.Throughput > 0 {
				x := a.Throughput / l.Throughput
				how := "one request at a time"
				if cs == title5PipeCase {
					how = "a transaction's statements pipelined"
				}
				fmt.Fprintf(&b, "| title5 through the API with the result cache, 8 clients (%s): ≥ %.0f× the local file's tps | %.2f× (%s against %s tps) | %s |\n", how, goalTitle5Cached, x, fmtRate(a.Throughput), fmtRate(l.Throughput), metBy(x >= goalTitle5Cached, goalTitle5Cached/x))
				rep.Metric(cs, pathAPICached, th, "tps_x_local", x)
			}
		}
	}
	return b.String()
}

// metBy says whether a goal is met, and if not by what factor it is
// missed (off: the figure over the goal, or the goal over the figure).
func metBy(met bool, off float64) string {
	if met {
		return "yes"
	}
	return fmt.Sprintf("no: missed by %.2f×", off)
}
