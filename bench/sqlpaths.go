package bench

// Helpers of the SQL suites (sql, sysbench, title5): a generated SQLite
// file imported into a folder store, a "chunkd serve" child over that
// store with an emulated round trip, and the paths a query can take to the
// pages: the local file, the store directly, the service.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
	"github.com/dustin/go-humanize"
)

// Path names of the SQL suites.
const (
	pathLocal       = "local"
	pathStoreDirect = "store-direct"
	pathService     = "service"
	pathServiceMem  = "service-mem"
	pathCold        = "service-cold"
	pathWarm        = "service-warm"
	pathSameHost    = "service-same-host"
)

// sqlDataset is a generated SQLite file and its import into a folder
// store.
type sqlDataset struct {
	file     string
	fileSize int64
	db       string
	storeDir string
	plain    store.Store // the folder store, no latency (imports)
	far      store.Store // the same with the emulated round trip
	storeURL string      // far, as a child process opens it
	rtt      time.Duration
	// bandwidth is the emulated store's cap, bytes a second (0: none).
	bandwidth int64
	imp       *sqlchunks.ImportResult
	genTook   time.Duration
	reused    bool
}

// prepareSQLDataset generates file name in the work dir with gen (unless
// it is there from a kept earlier run) and imports it, with an appendix
// file, as database db of a new folder store.
func prepareSQLDataset(ctx context.Context, r *Runner, name, db string, rtt time.Duration, gen func(path string) error) (*sqlDataset, error) {
	ds := &sqlDataset{file: filepath.Join(r.WorkDir, name), db: db, rtt: rtt, bandwidth: r.Config.Bandwidth}
	if fi, err := os.Stat(ds.file); err == nil && fi.Size() > 0 {
		ds.reused = true
		r.Logf("reusing %s", ds.file)
	} else {
		r.Logf("generating %s", ds.file)
		start := time.Now()
		if err := gen(ds.file); err != nil {
			return nil, fmt.Errorf("generate %s: %w", name, err)
		}
		ds.genTook = time.Since(start)
	}
	fi, err := os.Stat(ds.file)
	if err != nil {
		return nil, err
	}
	ds.fileSize = fi.Size()
	ds.storeDir = filepath.Join(r.WorkDir, "store-"+db)
	os.RemoveAll(ds.storeDir)
	if ds.plain, err = store.Open(ctx, ds.storeDir); err != nil {
		return nil, err
	}
	r.Logf("importing %s (%s) into %s", name, humanize.IBytes(uint64(ds.fileSize)), ds.storeDir)
	ds.imp, err = sqlchunks.Import(ctx, ds.plain, ds.file, sqlchunks.ImportOptions{DB: db, Message: "chunkd-bench", Appendix: true})
	if err != nil {
		ds.plain.Close()
		return nil, err
	}
	bw := r.Config.Bandwidth
	ds.far = store.WithLatency(ds.plain, rtt, bw)
	q := url.Values{}
	if rtt > 0 {
		q.Set("latency", rtt.String())
	}
	if bw > 0 {
		q.Set("bandwidth", strconv.FormatInt(bw, 10))
	}
	ds.storeURL = "file://" + ds.storeDir
	if len(q) > 0 {
		ds.storeURL += "?" + q.Encode()
	}
	return ds, nil
}

// storeEmulation describes the emulated store for the environment block.
func storeEmulation(rtt time.Duration, bw int64) string {
	s := fmt.Sprintf("an emulated round trip of %s per request", rtt)
	if bw > 0 {
		return s + fmt.Sprintf(" and a bandwidth cap of %s/s (store.WithLatency)", humanize.IBytes(uint64(bw)))
	}
	return s + " (store.WithLatency; no bandwidth limit)"
}

func (ds *sqlDataset) close() { ds.plain.Close() }

// describe is the data set's line in the environment block.
func (ds *sqlDataset) describe(what string) string {
	s := fmt.Sprintf("%s: %s SQLite file, %d pages of %d bytes; imported as database %q with an appendix file (%s), version %s",
		what, humanize.IBytes(uint64(ds.fileSize)), ds.imp.Pages, ds.imp.PageSize, ds.db, humanize.IBytes(uint64(ds.imp.AppendixBytes)), ds.imp.Root)
	if ds.reused {
		s += "; file reused from an earlier run (--keep)"
	} else {
		s += fmt.Sprintf("; generated in %s", ds.genTook.Round(time.Millisecond))
	}
	return s
}

// sqlDB is a database open on one path.
type sqlDB struct {
	*sqlitevfs.DB
	c      *client.Client    // nil for the local file
	opened *sqlchunks.Opened // its version, for a chunkd path
}

func (d *sqlDB) close() {
	d.DB.Close()
	if d.opened != nil {
		d.opened.Close()
	}
}

// stats returns the client's counters (zero for the local file).
func (d *sqlDB) stats() client.Stats {
	if d.c == nil {
		return client.Stats{}
	}
	return d.c.Stats()
}

// openLocalDB opens the local file through the same VFS as the other
// paths (page by page with pread), so they differ only in where pages
// come from.
func openLocalDB(file string, o *sqlitevfs.Options) (*sqlDB, error) {
	d, err := sqlitevfs.OpenFile(file, o)
	if err != nil {
		return nil, err
	}
	return &sqlDB{DB: d}, nil
}

// tierOpts say how a chunkd path opens the database.
type tierOpts struct {
	store    store.Store // as the client sees it (with the emulated round trip)
	db       string
	service  string // the service's URL; "" reads the store directly
	sameHost bool   // read the service's cache dir, which the client finds by itself (else: through its HTTP API only)
	mem      int64  // the client's memory tier: 0 its default (256 MiB), < 0 none
	prewarm  bool   // read every page into the memory tier before the first query
	sqlite   *sqlitevfs.Options
	log      io.Writer // the client's warnings
}

// openTierDB opens the head version as a new "chunkd sql" process would
// (sqlchunks.Open: through a service, its open set; on its host, its
// page image).
func openTierDB(ctx context.Context, o tierOpts) (*sqlDB, error) {
	src := sqlchunks.Source{Store: o.store, DB: o.db, Service: o.service, MemBytes: o.mem,
		Logger: slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if o.service != "" && !o.sameHost {
		src.ServiceDir = client.NoLocalDir // the service's host, measured as another host
	}
	v, err := sqlchunks.Open(ctx, src)
	if err != nil {
		return nil, err
	}
	if o.sameHost && v.Client.LocalDir() == "" {
		v.Close()
		return nil, fmt.Errorf("the same-host client did not find the service's cache directory")
	}
	if o.prewarm {
		if err := prewarm(ctx, v.Client, v.Root); err != nil {
			v.Close()
			return nil, err
		}
	}
	d, err := v.DB(o.sqlite)
	if err != nil {
		v.Close()
		return nil, err
	}
	return &sqlDB{DB: d, c: v.Client, opened: v}, nil
}

// prewarm reads every page of version root through c, so that its memory
// tier holds as many as fit.
func prewarm(ctx context.Context, c *client.Client, root addr.Addr) error {
	p, err := sqlchunks.OpenPages(ctx, c, root)
	if err != nil {
		return err
	}
	const batch = 4096
	n := p.PageCount()
	for first := int64(1); first <= n; first += batch {
		var as []addr.Addr
		for i := first; i < first+batch && i <= n; i++ {
			a, _ := p.PageAddr(i)
			as = append(as, a)
		}
		if err := c.GetMany(ctx, as, func(int, []byte) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

// drain reads every row and column of rows, as a client of a server
// would receive them, and returns the row count.
func drain(rows *sql.Rows) (int, error) { return drainFirst(rows, nil) }

// drainFirst is drain, calling first (if not nil) once the first row is
// read.
func drainFirst(rows *sql.Rows, first func()) (int, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		if n == 0 && first != nil {
			first()
		}
		n++
	}
	return n, rows.Err()
}

// sqlService is a "chunkd serve" child process over a data set's store.
type sqlService struct {
	*child
	cacheDir string
	hc       *http.Client
	started  time.Time
}

// startSQLService starts a service with an empty cache dir over the
// store at storeURL (with its emulated round trip), with extra flags, and
// waits until it is ready.
func startSQLService(ctx context.Context, r *Runner, binary, storeURL, cacheDir string, extra ...string) (*sqlService, error) {
	os.RemoveAll(cacheDir)
	args := []string{"serve", "--store", storeURL, "--cache-dir", cacheDir, "--listen", "127.0.0.1:0", "--grpc-listen", "",
		"--fsync=" + strconv.FormatBool(r.Config.Fsync), "--log-level", "info"}
	if r.Config.MemBytes > 0 {
		args = append(args, "--mem", strconv.FormatInt(r.Config.MemBytes, 10))
	}
	args = append(args, extra...)
	start := time.Now()
	c, err := startChild(ctx, binary, args, nil, nil)
	if err != nil {
		return nil, err
	}
	s := &sqlService{child: c, cacheDir: cacheDir, started: start,
		hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	if err := waitReady(ctx, s.hc, s.url+"/readyz", 30*time.Second); err != nil {
		s.stop(false)
		return nil, err
	}
	return s, nil
}

// serviceArgsNote describes how the SQL suites run the service.
func serviceArgsNote(r *Runner, binary, how string) string {
	mem := "its default --mem 256MiB"
	if r.Config.MemBytes > 0 {
		mem = "--mem " + humanize.IBytes(uint64(r.Config.MemBytes))
	}
	return fmt.Sprintf("child process `%s serve` (%s) on loopback HTTP, gRPC off, %s, --fsync=%v, its store the same folder with the emulated round trip; clients in the bench process",
		binary, how, mem, r.Config.Fsync)
}

// waitAppendix waits until the service has the database's appendix file
// on disk, and returns how long after the service started that was.
func (s *sqlService) waitAppendix(ctx context.Context, db string, timeout time.Duration) (took time.Duration, err error) {
	err = poll(ctx, 20*time.Millisecond, timeout, func() (bool, error) {
		info, err := dbInfo(ctx, s.hc, s.url, db)
		if err != nil {
			return false, err
		}
		for _, t := range info.Tables {
			if t.Appendix && t.State == api.StateCached {
				took = time.Since(s.started)
				return true, nil
			}
		}
		if exited, werr := s.exited(); exited {
			return false, fmt.Errorf("the service exited (%v):\n%s", werr, s.tail(20))
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("the service did not download the appendix file of %s in %s", db, timeout)
	})
	return took, err
}

// stop ends the service and removes its cache dir unless keep.
func (s *sqlService) stop(keep bool) error {
	err := s.child.stop()
	s.hc.CloseIdleConnections()
	if !keep {
		os.RemoveAll(s.cacheDir)
	}
	return err
}

// warmService starts a service over ds (with extra flags), has it
// download the appendix (a first client reads the version's root and
// page map through it, which misses), and waits for the download.
func warmService(ctx context.Context, r *Runner, binary string, ds *sqlDataset, cacheDir string, extra ...string) (*sqlService, time.Duration, error) {
	svc, err := startSQLService(ctx, r, binary, ds.storeURL, cacheDir, extra...)
	if err != nil {
		return nil, 0, err
	}
	d, err := openTierDB(ctx, tierOpts{store: ds.far, db: ds.db, service: svc.url, log: r.Config.Log})
	if err != nil {
		svc.stop(false)
		return nil, 0, fmt.Errorf("first read through the service: %w", err)
	}
	d.close()
	took, err := svc.waitAppendix(ctx, ds.db, 10*time.Minute)
	if err != nil {
		svc.stop(false)
		return nil, 0, err
	}
	if err := waitImage(ctx, ds, svc.url, cacheDir, 10*time.Minute); err != nil {
		svc.stop(false)
		return nil, 0, err
	}
	return svc, took, nil
}

// waitImage registers the head version's page image with the same-host
// service at url (as the same-host path's first reader does) and waits
// until the service has filled it: a warm service has its image too.
func waitImage(ctx context.Context, ds *sqlDataset, url, cacheDir string, limit time.Duration) error {
	c, err := client.Open(ctx, client.Options{Store: ds.far, DB: ds.db, Service: url, LocalDir: cacheDir, MemBytes: -1}) // the directory checked against the service
	if err != nil {
		return err
	}
	defer c.Close()
	root, err := sqlchunks.Head(ctx, c)
	if err != nil {
		return err
	}
	p, err := sqlchunks.OpenPages(ctx, c, root)
	if err != nil {
		return err
	}
	addrs := make([]addr.Addr, p.PageCount())
	for i := range addrs {
		addrs[i], _ = p.PageAddr(int64(i) + 1)
	}
	img, err := c.OpenImage(ctx, p.PageSize(), addrs)
	if err != nil {
		return fmt.Errorf("page image: %w", err)
	}
	defer img.Close()
	deadline := time.Now().Add(limit)
	for img.Filled() < len(addrs) {
		if time.Now().After(deadline) {
			return fmt.Errorf("page image: %d of %d pages filled after %v", img.Filled(), len(addrs), limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// tierSplit is where the pages a path read came from, from the client's
// counters: chunks served per tier.
type tierSplit struct {
	ops        int64
	pageReads  int64 // pages SQLite read through the VFS (its cache misses)
	svcReqs    int64 // requests the client made to the service (a batch is one)
	mem        int64 // the client's memory tier
	svcMem     int64 // the service, from its memory
	svcDisk    int64 // the service, from a file on its disk
	svcPartial int64 // the service, from a file still downloading
	svcStore   int64 // the service, read through from the store
	image      int64 // the service's page image on this host, read by the client
	local      int64 // the service's files on this host, read by the client (LocalDir)
	store      int64 // the store, read by the client itself
	hedged     int64
	svcErrors  int64
}

func (t *tierSplit) add(st client.Stats, pages, ops int64) {
	t.ops += ops
	t.pageReads += pages
	t.svcReqs += st.Service.Requests
	t.mem += st.Memory.Chunks
	t.svcMem += st.ServiceTiers.Memory
	t.svcDisk += st.ServiceTiers.Disk
	t.svcPartial += st.ServiceTiers.Partial
	t.svcStore += st.ServiceTiers.Store + st.ServiceTiers.Other
	t.image += st.ImageReads
	t.local += st.LocalChunks
	t.store += st.Store.Chunks - st.LocalChunks
	t.hedged += st.Hedged
	t.svcErrors += st.ServiceErrors
}

func (t tierSplit) chunks() int64 {
	return t.mem + t.svcMem + t.svcDisk + t.svcPartial + t.svcStore + t.image + t.local + t.store
}

// pct is n as a share of the chunks served, in percent ("–" for none).
func (t tierSplit) pct(n int64) string {
	c := t.chunks()
	if c == 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(n)/float64(c)*100, 'f', 1, 64) + "%"
}

// perOp is x per operation.
func (t tierSplit) perOp(x int64) string {
	if t.ops == 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(x)/float64(t.ops), 'f', 2, 64)
}

const tierTableHeader = "| pages read per op | service requests per op | client memory | service memory | service disk | service partial | service → store | same-host image | same-host files | store | hedged | service errors |"

// row renders the tier table's cells (after the leading columns).
func (t tierSplit) row(local bool) string {
	if local {
		return fmt.Sprintf(" %s | – | – | – | – | – | – | – | – | – | – | – |", t.perOp(t.pageReads))
	}
	return fmt.Sprintf(" %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d |", t.perOp(t.pageReads), t.perOp(t.svcReqs),
		t.pct(t.mem), t.pct(t.svcMem), t.pct(t.svcDisk), t.pct(t.svcPartial), t.pct(t.svcStore), t.pct(t.image), t.pct(t.local), t.pct(t.store), t.hedged, t.svcErrors)
}

// merge adds o's counts to t.
func (t *tierSplit) merge(o *tierSplit) {
	t.ops += o.ops
	t.pageReads += o.pageReads
	t.svcReqs += o.svcReqs
	t.mem += o.mem
	t.svcMem += o.svcMem
	t.svcDisk += o.svcDisk
	t.svcPartial += o.svcPartial
	t.svcStore += o.svcStore
	t.image += o.image
	t.local += o.local
	t.store += o.store
	t.hedged += o.hedged
	t.svcErrors += o.svcErrors
}

// summary names the tiers that served pages, with their shares.
func (t tierSplit) summary() string {
	var parts []string
	for _, x := range []struct {
		name string
		n    int64
	}{{"client memory", t.mem}, {"service memory", t.svcMem}, {"service disk", t.svcDisk}, {"service partial", t.svcPartial},
		{"service → store", t.svcStore}, {"same-host image", t.image}, {"same-host files", t.local}, {"store", t.store}} {
		if x.n > 0 {
			parts = append(parts, x.name+" "+t.pct(x.n))
		}
	}
	if len(parts) == 0 {
		return "no pages read through the tiers"
	}
	return fmt.Sprintf("%s (of %d pages)", strings.Join(parts, ", "), t.chunks())
}

// setHitRatios puts each chunkd path's tier shares, over all its cases
// (byPath), in the environment block, in the order of paths.
func setHitRatios(rep *Report, paths []string, byPath map[string]*tierSplit) {
	var parts []string
	for _, p := range paths {
		if p == pathLocal {
			continue
		}
		if t := byPath[p]; t != nil && t.chunks() > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", p, t.summary()))
		}
	}
	if len(parts) > 0 {
		rep.Env.Set("hit ratios per tier", "%s (pages SQLite's cache missed, all cases; per case under \"Where the pages came from\")", strings.Join(parts, "; "))
	}
}

// metrics records the split in metrics.csv.
func (t tierSplit) metrics(rep *Report, cs, path string, threads int) {
	if t.ops > 0 {
		rep.Metric(cs, path, threads, "page_reads_per_op", float64(t.pageReads)/float64(t.ops))
		if path != pathLocal {
			rep.Metric(cs, path, threads, "service_requests_per_op", float64(t.svcReqs)/float64(t.ops))
		}
	}
	c := float64(t.chunks())
	if c == 0 {
		return
	}
	for _, x := range []struct {
		name string
		n    int64
	}{{"client_memory", t.mem}, {"service_memory", t.svcMem}, {"service_disk", t.svcDisk},
		{"service_partial", t.svcPartial}, {"service_store", t.svcStore}, {"same_host_image", t.image}, {"same_host_files", t.local}, {"store", t.store}} {
		rep.Metric(cs, path, threads, "hit_ratio_"+x.name, float64(x.n)/c)
	}
}

// fmtMS renders microseconds as milliseconds, with the precision Dolt's
// tables use for their sizes of figures.
func fmtMS(us float64) string { return fmtDigits(us/1000, 1, 100, 3) }

// fmtWall renders a wall time for the seed's table.
func fmtWall(us float64) string {
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// oneShot is the Stats of one operation that took d: how the SQL suites
// record a query run once per run.
func oneShot(d time.Duration) Stats {
	st := Stats{Count: 1, Mean: d, P50: d, P95: d, P99: d}
	if d > 0 {
		st.Throughput = 1 / d.Seconds()
	}
	return st
}

// errRows is a row-count mismatch between paths: a wrong answer.
var errRows = errors.New("row counts differ between paths")

// joinNonEmpty joins the non-empty parts.
func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
