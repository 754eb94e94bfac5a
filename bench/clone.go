package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/doltremote"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/store"
	"github.com/dustin/go-humanize"
	"github.com/dustin/go-humanize/english"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The clone suite: a fleet of Dolt clients cloning one database through
// the service, against each cloning it from the store. Its paths are the
// SQL suites' names: pathStoreDirect, pathCold, pathWarm.
const (
	cloneDB   = "bench/clone" // the store's database; the repository is bench/clone too
	cloneRepo = cloneDB
)

// cloneRig is what the runs share: the data set and the emulated store.
type cloneRig struct {
	ds      *dataset
	st      *tableCounting // the emulated store, counted
	clients []int
	bw      int64
}

// cloneRuns collects what the runs measured, per path and client count.
type cloneRuns struct {
	stats map[caseKey][]Stats
	bytes map[caseKey][]float64 // table-file bytes read from the store, per clone
	reqs  map[caseKey][]float64 // store requests for table files, per clone
	mans  map[caseKey][]float64 // manifest reads, per clone
	first map[caseKey][]float64 // ms from a clone's start to its first table-file byte (median of the clients)
	// onDisk is the ms from the cold clones' start until the service had
	// every file on disk, verified; hedges the service's hedged store
	// reads (the counts of the cold clones and the downloads they caused).
	onDisk         map[caseKey][]float64
	hedges, hreads map[caseKey][]float64
}

// runClone measures clones: the requests dolt clone makes (metadata, root,
// the table-file list, a GET of every file, three at a time), replayed by
// doltremote.Client, from N clients at once.
func runClone(ctx context.Context, r *Runner) error {
	rig, err := prepareClone(ctx, r)
	if err != nil {
		return err
	}
	defer rig.st.Close()
	runs, err := measureClone(ctx, r, rig)
	reportClone(r, rig, runs)
	return err
}

func prepareClone(ctx context.Context, r *Runner) (*cloneRig, error) {
	cfg, rep := r.Config, r.Report
	target := pick[int64](cfg.Scale, 2<<20, 110<<20, 1100<<20)
	fileBytes := pick[int64](cfg.Scale, 512<<10, 16<<20, 64<<20)
	dir := filepath.Join(r.WorkDir, "store")
	ds, err := makeDataset(ctx, r, dir, cloneDB, target, 4<<10, fileBytes)
	if err != nil {
		return nil, err
	}
	plain, err := store.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	// A clone streams whole files: without a bandwidth cap the emulated
	// store would be as fast as the local disk, and only round trips would
	// count. S3 streams about 100 MB/s per connection.
	bw := cfg.Bandwidth
	if bw == 0 {
		bw = 100 << 20
	}
	rig := &cloneRig{ds: ds, st: &tableCounting{Store: store.WithLatency(plain, cfg.rtt(), bw)}, bw: bw,
		clients: cfg.clients([]int{1, 2}, []int{1, 4}, []int{1, 4, 16})}
	rep.Intro = "A Dolt clone through the service against one straight from the store. Each clone makes the requests `dolt clone` makes of a remote " +
		"(GetRepoMetadata, Root, ListTableFiles, then a GET of every table file, three at a time), replayed by `doltremote.Client`; " +
		"N clients clone at once, as a fleet of Dolt clients and replicas in one place does. Paths:\n\n" +
		"- `store-direct`: every client reads every table file whole from the store (what Dolt does with an S3 remote).\n" +
		"- `service-cold`: a fresh service (empty cache dir); the clients' downloads are answered from the service's downloads as their bytes arrive (several ranged reads of each file at once, what a client waits for first), each file read from the store once and each chunk hashed once.\n" +
		"- `service-warm`: the same service once its files are on disk.\n\n" +
		"A clone's time is from its first request to its last byte; throughput is the table-file bytes all clients received per second (MB/s); \"The cold path\" below adds the time to the first byte and, cold, until the service had every file on disk. " +
		"Multipliers are against `store-direct` at the same client count."
	rep.Env.Set("data set", "database %q: %d classic table files, %d chunks of %s (half random), %s of table files; written by the tablefile writer and a Dolt manifest (format %s)%s",
		ds.DB, len(ds.Files), ds.Chunks, sizeName(ds.ChunkSize), humanize.IBytes(uint64(ds.StoredBytes)), manifest.FormatDolt, reusedNote(ds.Reused))
	rep.Env.Set("store", "local folder (file://) under %s, read through %s", dir, storeEmulation(cfg.rtt(), bw))
	rep.Env.Set("service", "in-process: service.Start with the Dolt remote, gRPC and HTTP on 127.0.0.1:0, --downloads 8 (the default), fsync %s; the clients run in the same process and share the %d cores", onOff(cfg.Fsync), rep.Env.Cores)
	rep.Env.Set("clients", "%s", intList(rig.clients))
	rep.Env.Set("why replayed", "the data set is generated (random chunks under a Dolt manifest), so it is not a Dolt commit graph that dolt itself could check out; the replayed requests are the ones its clone makes of a remote (go/libraries/doltcore/remotestorage and go/store/datas/pull/clone.go), and cmd/chunkd's CHUNKD_DOLT test runs the real dolt clone, fetch and pull through the service")
	return rig, nil
}

func reusedNote(reused bool) string {
	if reused {
		return "; reused from an earlier run (--keep)"
	}
	return ""
}

func measureClone(ctx context.Context, r *Runner, rig *cloneRig) (*cloneRuns, error) {
	runs := &cloneRuns{stats: map[caseKey][]Stats{}, bytes: map[caseKey][]float64{}, reqs: map[caseKey][]float64{}, mans: map[caseKey][]float64{},
		first: map[caseKey][]float64{}, onDisk: map[caseKey][]float64{}, hedges: map[caseKey][]float64{}, hreads: map[caseKey][]float64{}}
	cs := caseName(rig)
	for run := 1; run <= r.Config.Runs; run++ {
		for _, n := range rig.clients {
			r.Logf("clone: run %d/%d, %d %s", run, r.Config.Runs, n, english.PluralWord(n, "client", ""))
			if err := measureCloneRun(ctx, r, rig, runs, cs, n); err != nil {
				return runs, err
			}
		}
	}
	return runs, nil
}

func caseName(rig *cloneRig) string {
	return humanize.IBytes(uint64(rig.ds.StoredBytes)) + " database"
}

// measureCloneRun measures each path once with n clients: the store
// directly, then a fresh service cold and, once its files are on disk,
// warm.
func measureCloneRun(ctx context.Context, r *Runner, rig *cloneRig, runs *cloneRuns, cs string, n int) error {
	record := func(path string, durs, firsts []time.Duration, wall time.Duration, before counts) {
		after := rig.st.counts()
		k := caseKey{cs, path, n}
		byTime := sorted(durs)
		var sum time.Duration
		for _, d := range durs {
			sum += d
		}
		runs.stats[k] = append(runs.stats[k], Stats{
			Count: int64(len(durs)), Mean: sum / time.Duration(len(durs)),
			P50: Percentile(byTime, 50), P95: Percentile(byTime, 95), P99: Percentile(byTime, 99),
			Throughput: float64(int64(n)*rig.ds.StoredBytes) / wall.Seconds() / 1e6,
		})
		r.Report.Samples(cs, path, n, durs)
		runs.bytes[k] = append(runs.bytes[k], float64(after.bytes-before.bytes)/float64(n))
		runs.reqs[k] = append(runs.reqs[k], float64(after.reqs-before.reqs)/float64(n))
		runs.mans[k] = append(runs.mans[k], float64(after.manifests-before.manifests)/float64(n))
		runs.first[k] = append(runs.first[k], float64(Percentile(sorted(firsts), 50).Microseconds())/1000)
	}

	before := rig.st.counts()
	var direct firstBytes
	durs, wall, err := fleet(ctx, n, func(ctx context.Context, i int) error { return cloneDirect(ctx, rig, direct.mark(i)) })
	if err != nil {
		return fmt.Errorf("%s: %w", pathStoreDirect, err)
	}
	record(pathStoreDirect, durs, direct.times(n), wall, before)

	svc, err := startCloneService(r, rig)
	if err != nil {
		return err
	}
	defer svc.close()
	for _, path := range []string{pathCold, pathWarm} {
		before := rig.st.counts()
		hedgesBefore := svc.svc.Cache.Hedges()
		var fb firstBytes
		start := time.Now()
		durs, wall, err := fleet(ctx, n, func(ctx context.Context, i int) error { return svc.clone(ctx, fb.mark(i)) })
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		k := caseKey{cs, path, n}
		if path == pathCold {
			// Everything the cold clones caused: the downloads they
			// started finish (and are committed) after the last byte.
			if err := svc.svc.Cache.WaitCached(ctx, cloneDB, 5*time.Minute, nil); err != nil {
				return err
			}
			runs.onDisk[k] = append(runs.onDisk[k], float64(time.Since(start).Microseconds())/1000)
		}
		h := svc.svc.Cache.Hedges()
		runs.hedges[k] = append(runs.hedges[k], float64(h.Hedges-hedgesBefore.Hedges))
		runs.hreads[k] = append(runs.hreads[k], float64(h.Reads-hedgesBefore.Reads))
		record(path, durs, fb.times(n), wall, before)
	}
	return nil
}

// firstBytes records when each clone of a fleet got its first table-file
// byte, after the clone started.
type firstBytes struct {
	mu sync.Mutex
	at map[int]time.Duration
}

// mark returns the hook clone i calls with each table file's first byte.
func (f *firstBytes) mark(i int) func(since time.Duration) {
	return func(since time.Duration) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.at == nil {
			f.at = map[int]time.Duration{}
		}
		if d, ok := f.at[i]; !ok || since < d {
			f.at[i] = since
		}
	}
}

func (f *firstBytes) times(n int) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, 0, n)
	for i := range n {
		out = append(out, f.at[i])
	}
	return out
}

// fleet runs n clones at once and returns each one's time and the wall
// time of all; clone gets its index in the fleet.
func fleet(ctx context.Context, n int, clone func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	durs := make([]time.Duration, n)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for i := range n {
		g.Go(func() error {
			t0 := time.Now()
			err := clone(gctx, i)
			durs[i] = time.Since(t0)
			return err
		})
	}
	err := g.Wait()
	return durs, time.Since(start), err
}

// cloneDirect reads every table file whole from the store, three at a
// time, as a Dolt client cloning an S3 remote does, and checks each
// length; first is called with the time to each file's first byte.
func cloneDirect(ctx context.Context, rig *cloneRig, first func(time.Duration)) error {
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(3)
	for _, f := range rig.ds.Files {
		g.Go(func() error {
			rc, _, err := rig.st.Open(gctx, f.Key)
			if err != nil {
				return err
			}
			defer rc.Close()
			n, err := io.Copy(io.Discard, &firstByteReader{r: rc, start: start, first: first})
			if err == nil && n != f.Size {
				err = fmt.Errorf("%s: %d bytes, want %d", f.Key, n, f.Size)
			}
			return err
		})
	}
	return g.Wait()
}

// firstByteReader calls first with the time since start at its first
// byte.
type firstByteReader struct {
	r     io.Reader
	start time.Time
	first func(time.Duration)
	got   bool
}

func (f *firstByteReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && !f.got {
		f.got = true
		f.first(time.Since(f.start))
	}
	return n, err
}

// firstByteTransport is an http.RoundTripper whose response bodies call
// first at their first byte (the time since the clone's start).
type firstByteTransport struct {
	http.RoundTripper
	start time.Time
	first func(time.Duration)
}

func (t firstByteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err == nil {
		resp.Body = readCloser{&firstByteReader{r: resp.Body, start: t.start, first: t.first}, resp.Body}
	}
	return resp, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// cloneService is one in-process service carrying the Dolt remote.
type cloneService struct {
	svc      *service.Service
	cacheDir string
	conn     *grpc.ClientConn
	hc       *http.Client
	rig      *cloneRig
}

func startCloneService(r *Runner, rig *cloneRig) (*cloneService, error) {
	cacheDir, err := os.MkdirTemp(r.Config.CacheDir, "clone-")
	if err != nil {
		return nil, err
	}
	svc, err := service.Start(service.Config{
		Cache: cache.Config{Store: rig.st, CacheDir: cacheDir, NoFsync: !r.Config.Fsync, DiskBytes: 4 * rig.ds.StoredBytes},
		HTTP:  "127.0.0.1:0", GRPC: "127.0.0.1:0", DoltRemote: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	s := &cloneService{svc: svc, cacheDir: cacheDir, rig: rig, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}}
	if s.conn, err = grpc.NewClient(svc.DoltAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		svc.Close()
		return nil, err
	}
	return s, nil
}

func (s *cloneService) clone(ctx context.Context, first func(time.Duration)) error {
	hc := &http.Client{Transport: firstByteTransport{RoundTripper: s.hc.Transport, start: time.Now(), first: first}}
	c := &doltremote.Client{RPC: remotesapi.NewChunkStoreServiceClient(s.conn), HTTP: hc, Repo: cloneRepo}
	res, err := c.Clone(ctx, "")
	if err == nil && res.Bytes != s.rig.ds.StoredBytes {
		err = fmt.Errorf("cloned %d bytes, the database has %d", res.Bytes, s.rig.ds.StoredBytes)
	}
	return err
}

func (s *cloneService) close() {
	s.conn.Close()
	s.svc.Close()
	os.RemoveAll(s.cacheDir)
}

func reportClone(r *Runner, rig *cloneRig, runs *cloneRuns) {
	rep := r.Report
	cs := caseName(rig)
	var b strings.Builder
	fmt.Fprintf(&b, "Bytes of table files read from the store per clone (the database is %s), medians over the runs; "+
		"manifest reads (two small objects: `manifest` and its sidecar) are counted apart: the service re-reads them once its copy is older than --manifest-ttl, to see pushes.\n\n",
		humanize.IBytes(uint64(rig.ds.StoredBytes)))
	b.WriteString("| path | clients | store bytes per clone | × the database | store requests per clone | manifest reads per clone |\n|---|--:|--:|--:|--:|--:|\n")
	for _, path := range []string{pathStoreDirect, pathCold, pathWarm} {
		for _, n := range rig.clients {
			k := caseKey{cs, path, n}
			if len(runs.stats[k]) == 0 {
				continue
			}
			rep.Add(Summarize(rep.Suite, cs, path, n, runs.stats[k]))
			by, rq, mn := median(runs.bytes[k]), median(runs.reqs[k]), median(runs.mans[k])
			rep.Metric(cs, path, n, "store_bytes_per_clone", by)
			rep.Metric(cs, path, n, "store_requests_per_clone", rq)
			rep.Metric(cs, path, n, "manifest_reads_per_clone", mn)
			fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %.1f | %.1f |\n", path, n, humanize.IBytes(uint64(by)), by/float64(rig.ds.StoredBytes), rq, mn)
			if path == pathWarm && by > 0 {
				rep.Notef("Warm clones read table-file bytes from the store (%s per clone with %d %s): the cache did not hold every file.", humanize.IBytes(uint64(by)), n, english.PluralWord(n, "client", ""))
			}
		}
	}
	rep.Section("Store reads per clone", b.String())

	var c strings.Builder
	c.WriteString("The cold path, medians over the runs: the time from a clone's start to its first table-file byte (the median of the clients), to its last, and, for `service-cold`, until the service had every file on its disk (verified, synced and renamed in); and the service's store reads that could be hedged (ranged reads, streams opened, heads, gets) with the second requests it sent for the slow ones.\n\n")
	c.WriteString("| path | clients | first byte | × store-direct | clone | × store-direct | files on disk | store reads | hedges |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, n := range rig.clients {
		base := caseKey{cs, pathStoreDirect, n}
		baseFirst := median(runs.first[base])
		baseRes, _ := rep.find(cs, pathStoreDirect, n)
		for _, path := range []string{pathStoreDirect, pathCold, pathWarm} {
			k := caseKey{cs, path, n}
			res, ok := rep.find(cs, path, n)
			if !ok || len(runs.first[k]) == 0 {
				continue
			}
			first := median(runs.first[k])
			rep.Metric(cs, path, n, "first_byte_ms", first)
			onDisk, reads, hedges := "–", "–", "–"
			if path != pathStoreDirect {
				rh, hh := median(runs.hreads[k]), median(runs.hedges[k])
				reads, hedges = fmt.Sprintf("%.0f", rh), fmt.Sprintf("%.0f", hh)
				rep.Metric(cs, path, n, "store_reads_hedgeable", rh)
				rep.Metric(cs, path, n, "store_hedges", hh)
				if rh > 0 {
					hedges += fmt.Sprintf(" (%.1f%%)", 100*hh/rh)
				}
			}
			if path == pathCold {
				d := median(runs.onDisk[k])
				onDisk = fmtWall(d * 1000)
				rep.Metric(cs, path, n, "files_on_disk_ms", d)
			}
			fmt.Fprintf(&c, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", path, n, fmtWall(first*1000), ratio(first, baseFirst),
				fmtWall(res.P50US), ratio(res.P50US, baseRes.P50US), onDisk, reads, hedges)
		}
	}
	rep.Section("The cold path", c.String())
}

// tableCounting counts what a store is asked for table files (every
// object but the manifest and its sidecar) and for manifests, apart.
type tableCounting struct {
	store.Store
	bytes, reqs, manifests atomic.Int64
}

type counts struct{ bytes, reqs, manifests int64 }

func (c *tableCounting) counts() counts {
	return counts{c.bytes.Load(), c.reqs.Load(), c.manifests.Load()}
}

func isManifestKey(key string) bool { return strings.HasPrefix(path.Base(key), manifest.ManifestName) }

func (c *tableCounting) count(key string, n int) {
	if isManifestKey(key) {
		c.manifests.Add(1)
		return
	}
	c.reqs.Add(1)
	c.bytes.Add(int64(n))
}

func (c *tableCounting) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, err := c.Store.ReadAt(ctx, key, p, off)
	c.count(key, n)
	return n, err
}

func (c *tableCounting) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.Store.Get(ctx, key)
	c.count(key, len(b))
	return b, err
}

func (c *tableCounting) Head(ctx context.Context, key string) (store.Info, error) {
	info, err := c.Store.Head(ctx, key)
	c.count(key, 0)
	return info, err
}

func (c *tableCounting) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	rc, info, err := c.Store.Open(ctx, key)
	c.count(key, 0)
	if err != nil || isManifestKey(key) {
		return rc, info, err
	}
	return countedBody{rc, &c.bytes}, info, nil
}

// ReadTail counts one request (store.TailReader).
func (c *tableCounting) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	n, size, err := store.ReadTail(ctx, c.Store, key, p)
	c.count(key, n)
	return n, size, err
}

// OpenRange counts one request for a ranged stream (store.RangeReader),
// and its bytes as they are read.
func (c *tableCounting) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := store.OpenRange(ctx, c.Store, key, off, n)
	c.count(key, 0)
	if err != nil || isManifestKey(key) {
		return rc, err
	}
	return countedBody{rc, &c.bytes}, nil
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
