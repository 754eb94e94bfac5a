package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/server"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/chunkd/chunkd/store/folder" // the data sets' stores
)

func init() { Register(chunksSuite{}) }

// chunksSuite measures GetChunk per path, from the floor (a bare HTTP
// server) to a read-through miss, with the service in this process.
type chunksSuite struct{}

func (chunksSuite) Name() string { return "chunks" }
func (chunksSuite) Synopsis() string {
	return "GetChunk latency and throughput per path: bare HTTP, memory hit, disk hit, read-through miss, store direct"
}

const chunksDB = "bench"

func (chunksSuite) Run(ctx context.Context, r *Runner) error {
	cfg := r.Config
	rep := r.Report
	rep.Baseline = "bare-http"
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = pick(cfg.Scale, []int{4 << 10}, []int{16 << 10}, []int{4 << 10, 16 << 10, 64 << 10})
	}
	clients := cfg.Clients
	if len(clients) == 0 {
		clients = pick(cfg.Scale, []int{1, 4}, []int{1, 4, 16}, []int{1, 2, 4, 8, 16, 32, 64})
	}
	rtt := cfg.RTT
	if rtt <= 0 {
		rtt = 30 * time.Millisecond
	}
	apis := []string{"http"}
	switch cfg.API {
	case "", "http":
	case "grpc":
		apis = []string{"grpc"}
	case "both":
		apis = []string{"http", "grpc"}
	default:
		return fmt.Errorf("bad API %q: want http, grpc or both", cfg.API)
	}
	load := Load{
		Warmup:   durationOr(cfg.Warmup, pick(cfg.Scale, 50*time.Millisecond, 300*time.Millisecond, time.Second)),
		Duration: durationOr(cfg.Duration, pick(cfg.Scale, 150*time.Millisecond, time.Second, 5*time.Second)),
		Count:    cfg.Count,
		MinCount: pick(cfg.Scale, 10, 100, 500),
	}
	rep.Intro = "GetChunk, one chunk per request, from clients in a closed loop (each sends its next request when the last is answered), " +
		"to the addresses of one table file in a random order (cycled: a chunk comes back only after all others). Paths, from the floor up:\n\n" +
		"- `bare-http`: a bare Go HTTP server on loopback answering every request with the same bytes: the floor any HTTP path stands on.\n" +
		"- `http-memory`: the service answers from its memory tier (every chunk is in memory).\n" +
		"- `http-disk`: the service answers from the whole table file on local disk (no memory tier: one pread per chunk; the file is in the page cache, as a just-downloaded file is).\n" +
		"- `http-miss`: a read-through miss: a fresh cache dir and a store with an emulated round trip; the file's download is held back so every request reads through (one ranged read from the store).\n" +
		"- `store-direct`: no service: the chunk read through `tablefile` over `store.ReaderAt` with the same emulated round trip, the index already in memory: what a client reading the store itself pays.\n" +
		"- `grpc-*`: the same service paths over gRPC (with `--api grpc` or `both`).\n\n" +
		"Multipliers are against `bare-http` at the same client count."
	rep.Env.Set("service", "in-process: server.New with net/http on 127.0.0.1:0 and gRPC on 127.0.0.1:0; the clients run in the same process, so clients and service share the %d cores", rep.Env.Cores)
	rep.Env.Set("store", "local folder (file://) under %s; the miss and store-direct paths read it through %s", r.WorkDir, storeEmulation(rtt, cfg.Bandwidth))
	rep.Env.Set("fsync", "%v (the service fsyncs downloaded files before serving them; reads never fsync)", onOff(cfg.Fsync))
	rep.Env.Set("timing", "per case and run: warm-up %s, then %s; runs interleave paths and client counts, so drift hits all paths alike", load.Warmup, describeLoad(load))
	rep.Env.Set("chunk sizes", "%s (random half, zeros half: about 2:1 under snappy)", sizeList(sizes))
	rep.Env.Set("clients", "%s", intList(clients))

	var failed []string
	for _, size := range sizes {
		if err := runChunksSize(ctx, r, size, clients, apis, rtt, load); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed = append(failed, sizeName(size))
			rep.Notef("%s chunks failed: %v", sizeName(size), err)
		}
	}
	if len(failed) == len(sizes) {
		return fmt.Errorf("every chunk size failed")
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// inproc is one in-process service.
type inproc struct {
	name  string
	cache *server.Cache
	url   string
	hs    *http.Server
	gs    *grpc.Server
	gconn *grpc.ClientConn
	gc    chunkpb.ChunkCacheClient
	tiers tierCounts // over measured phases
}

func startInproc(name string, cfg server.Config) (*inproc, error) {
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	s := &inproc{name: name, cache: c, tiers: tierCounts{}}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.Close()
		return nil, err
	}
	s.url = "http://" + hl.Addr().String()
	s.hs = &http.Server{Handler: server.NewHandler(c, reg), ReadHeaderTimeout: 10 * time.Second}
	go s.hs.Serve(hl)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.close()
		return nil, err
	}
	s.gs = server.NewGRPC(c)
	go s.gs.Serve(gl)
	s.gconn, err = grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(api.MaxGRPCMessage)))
	if err != nil {
		s.close()
		return nil, err
	}
	s.gc = chunkpb.NewChunkCacheClient(s.gconn)
	return s, nil
}

func (s *inproc) close() {
	if s.gconn != nil {
		s.gconn.Close()
	}
	if s.gs != nil {
		s.gs.Stop()
	}
	s.hs.Close()
	s.cache.Close()
}

// waitCached waits until every table file of db is on the service's disk.
func (s *inproc) waitCached(ctx context.Context, db string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		info, err := s.cache.DBInfo(ctx, db)
		if err != nil {
			return err
		}
		done := true
		for _, t := range info.Tables {
			done = done && t.State == api.StateCached
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: files not downloaded after %s", s.name, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stalledDownloads is a store whose whole-object streams of the given
// keys (table files) never start until ctx ends (the service closes): the
// service's download of such a file stays "in flight" with nothing
// arrived, so every miss reads through. Other objects (the manifest) open
// as usual.
type stalledDownloads struct {
	store.Store
	keys map[string]bool
}

func (s stalledDownloads) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if !s.keys[key] {
		return s.Store.Open(ctx, key)
	}
	<-ctx.Done()
	return nil, store.Info{}, ctx.Err()
}

// chunkClient gets chunks over HTTP into per-worker buffers, checking
// their length; callers check the tier header it returns.
type chunkClient struct {
	hc   *http.Client
	bufs [][]byte
	size int
}

func newChunkClient(maxClients, size int) *chunkClient {
	tr := &http.Transport{MaxIdleConns: 4 * maxClients, MaxIdleConnsPerHost: 2 * maxClients, DisableCompression: true, IdleConnTimeout: 5 * time.Minute}
	cc := &chunkClient{hc: &http.Client{Transport: tr, Timeout: time.Minute}, size: size}
	for i := 0; i < maxClients; i++ {
		cc.bufs = append(cc.bufs, make([]byte, size+1))
	}
	return cc
}

// get fetches url; it returns the tier header.
func (cc *chunkClient) get(ctx context.Context, w int, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := cc.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", api.ReadError(resp)
	}
	buf := cc.bufs[w]
	n, err := io.ReadFull(resp.Body, buf)
	if err != io.ErrUnexpectedEOF && err != nil {
		return "", err
	}
	if n != cc.size {
		return "", fmt.Errorf("got %d bytes, want %d", n, cc.size)
	}
	return resp.Header.Get(api.HeaderTier), nil
}

// chunkPath is one way of getting a chunk, measured as a path.
type chunkPath struct {
	name string
	svc  *inproc // nil for bare-http and store-direct
	op   Op
}

func runChunksSize(ctx context.Context, r *Runner, size int, clients []int, apis []string, rtt time.Duration, load Load) error {
	cfg := r.Config
	rep := r.Report
	cs := sizeName(size)
	maxClients := 1
	for _, c := range clients {
		maxClients = max(maxClients, c)
	}
	n := pick(cfg.Scale, 200, min(2000, max(256, (64<<20)/size)), min(2000, max(256, (64<<20)/size)))
	dir := filepath.Join(r.WorkDir, "chunks-"+cs)
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	defer st.Close()
	r.Logf("chunks %s: writing a table file of %d chunks", cs, n)
	db, err := testdb.Make(ctx, st, chunksDB, testdb.Options{Files: 1, Chunks: n, ChunkSize: size, Seed: int64(size)})
	if err != nil {
		return err
	}
	addrs := db.Files[0].Addrs
	rep.Env.Set("data set ("+cs+")", "1 table file, %d chunks of %s, %s stored (%s of chunks)", n, cs,
		humanize.IBytes(uint64(db.Files[0].Size)), humanize.IBytes(uint64(n*size)))
	db.Chunks = nil // the addresses are all the suite needs

	slow := store.WithLatency(st, rtt, cfg.Bandwidth)
	memBytes := int64(n)*int64(size+64)*2 + 32<<20
	base := server.Config{Store: st, NoFsync: !cfg.Fsync}
	mk := func(name string, c server.Config) (*inproc, error) {
		c.CacheDir = filepath.Join(cfg.CacheDir, "chunkd-bench-chunks-"+cs+"-"+name)
		os.RemoveAll(c.CacheDir)
		return startInproc(name, c)
	}
	memCfg, diskCfg, missCfg := base, base, base
	memCfg.MemBytes = memBytes
	diskCfg.MemBytes = 1 // nothing fits: every chunk is read from the file
	missCfg.MemBytes = 1
	missCfg.Store = stalledDownloads{slow, map[string]bool{db.Files[0].Key: true}}
	var svcs []*inproc
	defer func() {
		for _, s := range svcs {
			s.close()
			if !cfg.Keep {
				os.RemoveAll(filepath.Join(cfg.CacheDir, "chunkd-bench-chunks-"+cs+"-"+s.name))
			}
		}
	}()
	for _, x := range []struct {
		name string
		c    server.Config
	}{{"memory", memCfg}, {"disk", diskCfg}, {"miss", missCfg}} {
		s, err := mk(x.name, x.c)
		if err != nil {
			return err
		}
		svcs = append(svcs, s)
	}
	memSvc, diskSvc, missSvc := svcs[0], svcs[1], svcs[2]
	rep.Env.Set("cache sizes ("+cs+")", "memory path: --mem %s (every chunk fits); disk and miss paths: no memory tier (--mem 1 byte); disk 10 GiB", humanize.IBytes(uint64(memBytes)))

	cc := newChunkClient(maxClients, size)
	defer cc.hc.CloseIdleConnections()
	prep := cc // the same client warms the services up
	url := func(s *inproc, a addr.Addr) string { return s.url + api.ChunkPath(chunksDB, a) }

	// Warm up: the memory service downloads the file and then holds every
	// chunk; the disk service has the file; the miss service has loaded
	// the index (a few round trips) and its download is stalled.
	r.Logf("chunks %s: preparing the services (downloads, memory tier, index over the %s store)", cs, rtt)
	for _, s := range []*inproc{memSvc, diskSvc} {
		if _, err := prep.get(ctx, 0, url(s, addrs[0])); err != nil {
			return fmt.Errorf("%s service: %w", s.name, err)
		}
		if err := s.waitCached(ctx, chunksDB, 2*time.Minute); err != nil {
			return err
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, a := range addrs {
			if _, err := prep.get(ctx, 0, url(memSvc, a)); err != nil {
				return fmt.Errorf("memory service: %w", err)
			}
		}
	}
	if tier, err := prep.get(ctx, 0, url(missSvc, addrs[0])); err != nil {
		return fmt.Errorf("miss service: %w", err)
	} else if tier != api.TierStore.String() {
		return fmt.Errorf("miss service answered from %s, not the store", tier)
	}
	tf, err := tablefile.Open(store.ReaderAt(ctx, slow, db.Files[0].Key), db.Files[0].Size, &tablefile.Options{Tail: 64 << 10})
	if err != nil {
		return fmt.Errorf("store-direct: open index: %w", err)
	}

	// The paths.
	payload := bytes.Repeat([]byte{7}, size)
	bare := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", api.ContentTypeBinary)
		h.Set("Content-Length", fmt.Sprint(size))
		w.Write(payload)
	})}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go bare.Serve(bl)
	defer bare.Close()
	bareURL := "http://" + bl.Addr().String() + "/chunk"

	// Addresses in a shuffled order, cycled through by all clients: random,
	// and a chunk comes back only after every other one (so the disk and
	// miss paths, whose memory tier is one byte, never see a chunk the
	// memory tier has not yet let go of).
	perm := append([]addr.Addr(nil), addrs...)
	rand.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	var seq atomic.Uint64
	pickAddr := func(*rand.Rand) addr.Addr { return perm[seq.Add(1)%uint64(len(perm))] }
	httpOp := func(s *inproc, want api.Tier) Op {
		return func(ctx context.Context, w int, rng *rand.Rand) error {
			tier, err := cc.get(ctx, w, url(s, pickAddr(rng)))
			if err != nil {
				return err
			}
			if tier != want.String() {
				return fmt.Errorf("served from %q, want %s", tier, want)
			}
			return nil
		}
	}
	grpcOp := func(s *inproc, want api.Tier) Op {
		return func(ctx context.Context, w int, rng *rand.Rand) error {
			a := pickAddr(rng)
			resp, err := s.gc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: chunksDB, Address: a[:]})
			if err != nil {
				return err
			}
			if !resp.Found || len(resp.Contents) != size {
				return fmt.Errorf("found %v, %d bytes, want %d", resp.Found, len(resp.Contents), size)
			}
			if got := api.Tier(resp.Tier); got != want {
				return fmt.Errorf("served from %s, want %s", got, want)
			}
			return nil
		}
	}
	paths := []chunkPath{{name: "bare-http", op: func(ctx context.Context, w int, rng *rand.Rand) error {
		_, err := cc.get(ctx, w, bareURL)
		return err
	}}}
	for _, a := range apis {
		for _, x := range []struct {
			svc  *inproc
			tier api.Tier
		}{{memSvc, api.TierMemory}, {diskSvc, api.TierDisk}, {missSvc, api.TierStore}} {
			p := chunkPath{name: a + "-" + x.svc.name, svc: x.svc}
			if a == "http" {
				p.op = httpOp(x.svc, x.tier)
			} else {
				p.op = grpcOp(x.svc, x.tier)
			}
			paths = append(paths, p)
		}
	}
	paths = append(paths, chunkPath{name: "store-direct", op: func(ctx context.Context, w int, rng *rand.Rand) error {
		data, err := tf.Get(pickAddr(rng))
		if err != nil {
			return err
		}
		if len(data) != size {
			return fmt.Errorf("got %d bytes, want %d", len(data), size)
		}
		return nil
	}})

	// Measure: runs outermost, so each path's runs are spread over time.
	type key struct {
		path    string
		clients int
	}
	stats := map[key][]Stats{}
	syscr := map[key][]float64{}     // read syscalls of this process per op, per run
	rchar := map[key][]float64{}     // bytes those calls returned per op, per run
	diskReads := map[key][]float64{} // the service's own count, per disk-served chunk
	failed := map[key]error{}
	for run := 1; run <= cfg.Runs; run++ {
		for _, c := range clients {
			for _, p := range paths {
				k := key{p.name, c}
				if failed[k] != nil {
					continue
				}
				var before, after promSamples
				var io0 procIO
				var ioErr error
				l := load
				l.Clients = c
				l.Mark = func() {
					if p.svc != nil {
						before, _ = scrapeMetrics(ctx, cc.hc, p.svc.url+"/metrics")
					}
					io0, ioErr = readProcIO("self")
				}
				s, err := Drive(ctx, l, p.op)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					failed[k] = err
					rep.Notef("%s %s with %d clients failed in run %d: %v", cs, p.name, c, run, err)
					continue
				}
				io1, ioErr1 := readProcIO("self")
				if p.svc != nil {
					after, _ = scrapeMetrics(ctx, cc.hc, p.svc.url+"/metrics")
					if before != nil && after != nil {
						p.svc.tiers.add(after, before)
						if d := after.hits()["disk"] - before.hits()["disk"]; d > 0 {
							diskReads[k] = append(diskReads[k], (after.diskReads()-before.diskReads())/d)
						}
					}
				}
				st := s.Stats()
				if ioErr == nil && ioErr1 == nil && st.Count > 0 {
					syscr[k] = append(syscr[k], float64(io1.sub(io0).Syscr)/float64(st.Count))
					rchar[k] = append(rchar[k], float64(io1.sub(io0).Rchar)/float64(st.Count))
				}
				stats[k] = append(stats[k], st)
				if c == clients[0] {
					rep.Samples(cs, p.name, c, s.Lat)
				}
				r.Logf("chunks %s: run %d/%d %-13s %2d clients: p50 %s µs, p99 %s µs, %s ops/s", cs, run, cfg.Runs, p.name, c,
					fmtUS(us(st.P50)), fmtUS(us(st.P99)), fmtRate(st.Throughput))
			}
		}
	}
	for _, p := range paths {
		for _, c := range clients {
			k := key{p.name, c}
			if len(stats[k]) > 0 {
				rep.Add(Summarize("chunks", cs, p.name, c, stats[k]))
			}
		}
	}

	avgRecord := float64(tf.DataEnd()) / float64(n)
	// Disk reads per disk-served chunk: what the disk path adds to the
	// memory path's read syscalls (socket reads of client and service).
	var b strings.Builder
	fmt.Fprintf(&b, "Read syscalls of this process (service and clients) per request, from /proc/self/io, and their difference: "+
		"what serving a chunk from disk adds to serving it from memory (goal 1.00: the index and bloom filter are in memory, so a disk hit is one pread). "+
		"Bytes ÷ record is the same difference in bytes returned by read calls (rchar), divided by the average record (%.0f bytes): 1.00 means the disk path read each chunk's record and nothing else. "+
		"The last column is the service's own count (chunkd_disk_reads_total per disk hit). Medians over runs. "+
		"Socket reads that find nothing yet (EAGAIN) count as read syscalls too, and how often that happens depends on timing, so the syscall difference can stray from 1.00 by a fraction (gRPC's HTTP/2 framing, which batches, strays most); the bytes do not.\n\n", avgRecord)
	fmt.Fprintf(&b, "| API | clients | syscr/req memory | syscr/req disk | disk reads per disk-served chunk | bytes ÷ record | service's count |\n|---|--:|--:|--:|--:|--:|--:|\n")
	rows := 0
	for _, a := range apis {
		for _, c := range clients {
			m, d := syscr[key{a + "-memory", c}], syscr[key{a + "-disk", c}]
			if len(m) == 0 || len(d) == 0 {
				continue
			}
			var diffs, bytesRatio []float64
			for i := 0; i < min(len(m), len(d)); i++ {
				diffs = append(diffs, d[i]-m[i])
			}
			mb, db := rchar[key{a + "-memory", c}], rchar[key{a + "-disk", c}]
			for i := 0; i < min(len(mb), len(db)); i++ {
				bytesRatio = append(bytesRatio, (db[i]-mb[i])/avgRecord)
			}
			own := median(diskReads[key{a + "-disk", c}])
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | **%.2f** | %.2f | %.2f |\n", a, c, median(m), median(d), median(diffs), median(bytesRatio), own)
			rep.Metric(cs, a+"-disk", c, "file_bytes_per_disk_chunk_over_record", median(bytesRatio))
			rep.Metric(cs, a+"-disk", c, "disk_reads_per_disk_chunk", median(diffs))
			rep.Metric(cs, a+"-disk", c, "service_disk_reads_per_disk_chunk", own)
			rep.Metric(cs, a+"-memory", c, "syscr_per_request", median(m))
			rep.Metric(cs, a+"-disk", c, "syscr_per_request", median(d))
			rows++
		}
	}
	if rows > 0 {
		rep.Section("Disk reads per disk-served chunk ("+cs+")", b.String())
	}
	var hr []string
	for _, s := range svcs {
		hr = append(hr, s.name+" service: "+s.tiers.String())
		for _, t := range tiers {
			if n := s.tiers.total(); n > 0 {
				rep.Metric(cs, s.name+"-service", 0, "hit_ratio_"+t, s.tiers[t]/n)
			}
		}
	}
	rep.Env.Set("hit ratios per tier ("+cs+")", "%s (measured phases, from each service's /metrics)", strings.Join(hr, "; "))
	if len(failed) > 0 {
		var errs []error
		for k, err := range failed {
			errs = append(errs, fmt.Errorf("%s/%d: %w", k.path, k.clients, err))
		}
		if len(failed) == len(paths)*len(clients) {
			return errors.Join(errs...)
		}
	}
	return nil
}
