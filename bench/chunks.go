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
	"slices"
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

const chunksDB = "bench"

// runChunks measures GetChunk per path, from the floor (a bare HTTP
// server) to a read-through miss, with the service in this process.
func runChunks(ctx context.Context, r *Runner) error {
	cfg := r.Config
	rep := r.Report
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = pick(cfg.Scale, []int{4 << 10}, []int{16 << 10}, []int{4 << 10, 16 << 10, 64 << 10})
	}
	clients := cfg.clients([]int{1, 4}, []int{1, 4, 16}, []int{1, 2, 4, 8, 16, 32, 64})
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
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 50*time.Millisecond, 300*time.Millisecond, time.Second),
		Duration: pick(cfg.Scale, 150*time.Millisecond, time.Second, 5*time.Second),
		MinCount: pick(cfg.Scale, 10, 100, 500),
	})
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
	rep.Env.Set("store", "local folder (file://) under %s; the miss and store-direct paths read it through %s", r.WorkDir, storeEmulation(cfg.rtt(), cfg.Bandwidth))
	rep.Env.Set("fsync", "%v (the service fsyncs downloaded files before serving them; reads never fsync)", onOff(cfg.Fsync))
	rep.Env.Set("timing", "per case and run: warm-up %s, then %s; runs interleave paths and client counts, so drift hits all paths alike", load.Warmup, describeLoad(load))
	rep.Env.Set("chunk sizes", "%s (random half, zeros half: about 2:1 under snappy)", sizeList(sizes))
	rep.Env.Set("clients", "%s", intList(clients))

	var failed []string
	for _, size := range sizes {
		if err := runChunksSize(ctx, r, size, clients, apis, load); err != nil {
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
	return poll(ctx, 10*time.Millisecond, timeout, func() (bool, error) {
		info, err := s.cache.DBInfo(ctx, db)
		if err != nil {
			return false, err
		}
		done := true
		for _, t := range info.Tables {
			done = done && t.State == api.StateCached
		}
		return done, nil
	}, func() error { return fmt.Errorf("%s: files not downloaded after %s", s.name, timeout) })
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

// runChunksSize measures every path with chunks of size bytes.
func runChunksSize(ctx context.Context, r *Runner, size int, clients []int, apis []string, load Load) error {
	rig := &chunksRig{cs: sizeName(size), size: size}
	defer rig.close(r.Config)
	if err := rig.prepare(ctx, r, max(1, slices.Max(clients))); err != nil {
		return err
	}
	paths := rig.paths(apis)
	m, err := measureChunks(ctx, r, rig, paths, clients, load)
	if err != nil {
		return err
	}
	m.report(r.Report, rig, paths, clients, apis)
	if len(m.failed) == len(paths)*len(clients) {
		var errs []error
		for k, err := range m.failed {
			errs = append(errs, fmt.Errorf("%s/%d: %w", k.path, k.clients, err))
		}
		return errors.Join(errs...)
	}
	return nil
}

// chunksRig is what one chunk size is measured on: a table file in a
// folder store; three in-process services over it, the first holding
// every chunk in memory, the second the file on disk and no memory tier,
// the third reading every chunk through from the store with an emulated
// round trip; the file's index over that store, for store-direct; and a
// bare HTTP server.
type chunksRig struct {
	cs   string // the case: the size's name
	size int
	n    int // chunks

	dir     string // scratch: the store
	st      store.Store
	slow    store.Store // st with the emulated round trip
	file    testdb.File
	svcs    []*inproc // memory, disk, miss
	cc      *chunkClient
	tf      *tablefile.Table // store-direct's index, over slow
	bare    *http.Server
	bareURL string
}

// prepare writes the data set, starts the services and warms them up,
// opens the file's index for store-direct and starts the bare server.
func (rig *chunksRig) prepare(ctx context.Context, r *Runner, maxClients int) error {
	cfg, rep, cs, size := r.Config, r.Report, rig.cs, rig.size
	rig.n = pick(cfg.Scale, 200, min(2000, max(256, (64<<20)/size)), min(2000, max(256, (64<<20)/size)))
	rig.dir = filepath.Join(r.WorkDir, "chunks-"+cs)
	os.RemoveAll(rig.dir)
	var err error
	if rig.st, err = store.Open(ctx, filepath.Join(rig.dir, "store")); err != nil {
		return err
	}
	r.Logf("chunks %s: writing a table file of %d chunks", cs, rig.n)
	db, err := testdb.Make(ctx, rig.st, chunksDB, testdb.Options{Files: 1, Chunks: rig.n, ChunkSize: size, Seed: int64(size)})
	if err != nil {
		return err
	}
	rig.file = db.Files[0]
	rep.Env.Set("data set ("+cs+")", "1 table file, %d chunks of %s, %s stored (%s of chunks)", rig.n, cs,
		humanize.IBytes(uint64(rig.file.Size)), humanize.IBytes(uint64(rig.n*size)))
	db.Chunks = nil // the addresses are all the suite needs

	rig.slow = store.WithLatency(rig.st, cfg.rtt(), cfg.Bandwidth)
	memBytes := int64(rig.n)*int64(size+64)*2 + 32<<20
	base := server.Config{Store: rig.st, NoFsync: !cfg.Fsync}
	memCfg, diskCfg, missCfg := base, base, base
	memCfg.MemBytes = memBytes
	diskCfg.MemBytes = 1 // nothing fits: every chunk is read from the file
	missCfg.MemBytes = 1
	missCfg.Store = stalledDownloads{rig.slow, map[string]bool{rig.file.Key: true}}
	for _, x := range []struct {
		name string
		c    server.Config
	}{{"memory", memCfg}, {"disk", diskCfg}, {"miss", missCfg}} {
		x.c.CacheDir = rig.cacheDir(cfg, x.name)
		os.RemoveAll(x.c.CacheDir)
		s, err := startInproc(x.name, x.c)
		if err != nil {
			return err
		}
		rig.svcs = append(rig.svcs, s)
	}
	rep.Env.Set("cache sizes ("+cs+")", "memory path: --mem %s (every chunk fits); disk and miss paths: no memory tier (--mem 1 byte); disk 10 GiB", humanize.IBytes(uint64(memBytes)))
	rig.cc = newChunkClient(maxClients, size)
	r.Logf("chunks %s: preparing the services (downloads, memory tier, index over the %s store)", cs, cfg.rtt())
	if err := rig.warm(ctx); err != nil {
		return err
	}
	if rig.tf, err = tablefile.Open(store.ReaderAt(ctx, rig.slow, rig.file.Key), rig.file.Size, &tablefile.Options{Tail: 64 << 10}); err != nil {
		return fmt.Errorf("store-direct: open index: %w", err)
	}
	payload := bytes.Repeat([]byte{7}, size)
	rig.bare = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", api.ContentTypeBinary)
		h.Set("Content-Length", fmt.Sprint(size))
		w.Write(payload)
	})}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go rig.bare.Serve(bl)
	rig.bareURL = "http://" + bl.Addr().String() + "/chunk"
	return nil
}

func (rig *chunksRig) cacheDir(cfg Config, svc string) string {
	return filepath.Join(cfg.CacheDir, "chunkd-bench-chunks-"+rig.cs+"-"+svc)
}

// url is the address of chunk a on service s.
func (rig *chunksRig) url(s *inproc, a addr.Addr) string { return s.url + api.ChunkPath(chunksDB, a) }

// warm makes the services ready: the memory service downloads the file
// and then holds every chunk; the disk service has the file; the miss
// service has loaded the index (a few round trips) and its download is
// stalled.
func (rig *chunksRig) warm(ctx context.Context) error {
	memSvc, diskSvc, missSvc := rig.svcs[0], rig.svcs[1], rig.svcs[2]
	addrs := rig.file.Addrs
	for _, s := range []*inproc{memSvc, diskSvc} {
		if _, err := rig.cc.get(ctx, 0, rig.url(s, addrs[0])); err != nil {
			return fmt.Errorf("%s service: %w", s.name, err)
		}
		if err := s.waitCached(ctx, chunksDB, 2*time.Minute); err != nil {
			return err
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, a := range addrs {
			if _, err := rig.cc.get(ctx, 0, rig.url(memSvc, a)); err != nil {
				return fmt.Errorf("memory service: %w", err)
			}
		}
	}
	if tier, err := rig.cc.get(ctx, 0, rig.url(missSvc, addrs[0])); err != nil {
		return fmt.Errorf("miss service: %w", err)
	} else if tier != api.TierStore.String() {
		return fmt.Errorf("miss service answered from %s, not the store", tier)
	}
	return nil
}

func (rig *chunksRig) close(cfg Config) {
	if rig.bare != nil {
		rig.bare.Close()
	}
	if rig.cc != nil {
		rig.cc.hc.CloseIdleConnections()
	}
	for _, s := range rig.svcs {
		s.close()
		if !cfg.Keep {
			os.RemoveAll(rig.cacheDir(cfg, s.name))
		}
	}
	if rig.st != nil {
		rig.st.Close()
	}
	if rig.dir != "" {
		os.RemoveAll(rig.dir)
	}
}

// paths are bare-http, each service over each API, and store-direct.
// They read the file's addresses in a shuffled order, cycled through by
// all clients: random, and a chunk comes back only after every other one
// (so the disk and miss paths, whose memory tier is one byte, never see
// a chunk the memory tier has not yet let go of).
func (rig *chunksRig) paths(apis []string) []chunkPath {
	size, cc := rig.size, rig.cc
	perm := append([]addr.Addr(nil), rig.file.Addrs...)
	rand.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	var seq atomic.Uint64
	pickAddr := func(*rand.Rand) addr.Addr { return perm[seq.Add(1)%uint64(len(perm))] }
	httpOp := func(s *inproc, want api.Tier) Op {
		return func(ctx context.Context, w int, rng *rand.Rand) error {
			tier, err := cc.get(ctx, w, rig.url(s, pickAddr(rng)))
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
		_, err := cc.get(ctx, w, rig.bareURL)
		return err
	}}}
	for _, a := range apis {
		for i, tier := range []api.Tier{api.TierMemory, api.TierDisk, api.TierStore} {
			svc := rig.svcs[i]
			p := chunkPath{name: a + "-" + svc.name, svc: svc}
			if a == "http" {
				p.op = httpOp(svc, tier)
			} else {
				p.op = grpcOp(svc, tier)
			}
			paths = append(paths, p)
		}
	}
	return append(paths, chunkPath{name: "store-direct", op: func(ctx context.Context, w int, rng *rand.Rand) error {
		data, err := rig.tf.Get(pickAddr(rng))
		if err != nil {
			return err
		}
		if len(data) != size {
			return fmt.Errorf("got %d bytes, want %d", len(data), size)
		}
		return nil
	}})
}

// chunkKey names a path with a client count.
type chunkKey struct {
	path    string
	clients int
}

// chunkRuns is what measureChunks measured, per path and client count.
type chunkRuns struct {
	stats     map[chunkKey][]Stats
	syscr     map[chunkKey][]float64 // read syscalls of this process per op, per run
	rchar     map[chunkKey][]float64 // bytes those calls returned per op, per run
	diskReads map[chunkKey][]float64 // the service's own count, per disk-served chunk
	failed    map[chunkKey]error
}

// measureChunks drives every path with every client count, runs
// outermost, so each path's runs are spread over time.
func measureChunks(ctx context.Context, r *Runner, rig *chunksRig, paths []chunkPath, clients []int, load Load) (*chunkRuns, error) {
	cfg, rep, cs := r.Config, r.Report, rig.cs
	m := &chunkRuns{stats: map[chunkKey][]Stats{}, syscr: map[chunkKey][]float64{}, rchar: map[chunkKey][]float64{},
		diskReads: map[chunkKey][]float64{}, failed: map[chunkKey]error{}}
	for run := 1; run <= cfg.Runs; run++ {
		for _, c := range clients {
			for _, p := range paths {
				k := chunkKey{p.name, c}
				if m.failed[k] != nil {
					continue
				}
				var before, after promSamples
				var io0 procIO
				var ioErr error
				l := load
				l.Clients = c
				l.Mark = func() {
					if p.svc != nil {
						before, _ = scrapeMetrics(ctx, rig.cc.hc, p.svc.url+"/metrics")
					}
					io0, ioErr = readProcIO("self")
				}
				s, err := Drive(ctx, l, p.op)
				if err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					m.failed[k] = err
					rep.Notef("%s %s with %d clients failed in run %d: %v", cs, p.name, c, run, err)
					continue
				}
				io1, ioErr1 := readProcIO("self")
				if p.svc != nil {
					after, _ = scrapeMetrics(ctx, rig.cc.hc, p.svc.url+"/metrics")
					if before != nil && after != nil {
						p.svc.tiers.add(after, before)
						if d := after.hits()["disk"] - before.hits()["disk"]; d > 0 {
							m.diskReads[k] = append(m.diskReads[k], (after.diskReads()-before.diskReads())/d)
						}
					}
				}
				st := s.Stats()
				if ioErr == nil && ioErr1 == nil && st.Count > 0 {
					m.syscr[k] = append(m.syscr[k], float64(io1.sub(io0).Syscr)/float64(st.Count))
					m.rchar[k] = append(m.rchar[k], float64(io1.sub(io0).Rchar)/float64(st.Count))
				}
				m.stats[k] = append(m.stats[k], st)
				if c == clients[0] {
					rep.Samples(cs, p.name, c, s.Lat)
				}
				r.Logf("chunks %s: run %d/%d %-13s %2d clients: p50 %s µs, p99 %s µs, %s ops/s", cs, run, cfg.Runs, p.name, c,
					fmtUS(us(st.P50)), fmtUS(us(st.P99)), fmtRate(st.Throughput))
			}
		}
	}
	return m, nil
}

// report adds the results, the disk reads per disk-served chunk, and the
// services' hit ratios.
func (m *chunkRuns) report(rep *Report, rig *chunksRig, paths []chunkPath, clients []int, apis []string) {
	cs := rig.cs
	for _, p := range paths {
		for _, c := range clients {
			if st := m.stats[chunkKey{p.name, c}]; len(st) > 0 {
				rep.Add(Summarize("chunks", cs, p.name, c, st))
			}
		}
	}

	avgRecord := float64(rig.tf.DataEnd()) / float64(rig.n)
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
			mem, disk := chunkKey{a + "-memory", c}, chunkKey{a + "-disk", c}
			ms, ds := m.syscr[mem], m.syscr[disk]
			if len(ms) == 0 || len(ds) == 0 {
				continue
			}
			var diffs, bytesRatio []float64
			for i := 0; i < min(len(ms), len(ds)); i++ {
				diffs = append(diffs, ds[i]-ms[i])
			}
			mb, db := m.rchar[mem], m.rchar[disk]
			for i := 0; i < min(len(mb), len(db)); i++ {
				bytesRatio = append(bytesRatio, (db[i]-mb[i])/avgRecord)
			}
			own := median(m.diskReads[disk])
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | **%.2f** | %.2f | %.2f |\n", a, c, median(ms), median(ds), median(diffs), median(bytesRatio), own)
			rep.Metric(cs, disk.path, c, "file_bytes_per_disk_chunk_over_record", median(bytesRatio))
			rep.Metric(cs, disk.path, c, "disk_reads_per_disk_chunk", median(diffs))
			rep.Metric(cs, disk.path, c, "service_disk_reads_per_disk_chunk", own)
			rep.Metric(cs, mem.path, c, "syscr_per_request", median(ms))
			rep.Metric(cs, disk.path, c, "syscr_per_request", median(ds))
			rows++
		}
	}
	if rows > 0 {
		rep.Section("Disk reads per disk-served chunk ("+cs+")", b.String())
	}
	var hr []string
	for _, s := range rig.svcs {
		hr = append(hr, s.name+" service: "+s.tiers.String())
		for _, t := range tiers {
			if n := s.tiers.total(); n > 0 {
				rep.Metric(cs, s.name+"-service", 0, "hit_ratio_"+t, s.tiers[t]/n)
			}
		}
	}
	rep.Env.Set("hit ratios per tier ("+cs+")", "%s (measured phases, from each service's /metrics)", strings.Join(hr, "; "))
}
