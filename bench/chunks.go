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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/shellquote"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/dustin/go-humanize"
	"github.com/dustin/go-humanize/english"
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
	// 1 and 8 clients are the nginx comparison's goals.
	clients := cfg.clients([]int{1, 8}, []int{1, 4, 8, 16}, []int{1, 2, 4, 8, 16, 32, 64})
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
		"- `http-miss`: a read-through miss: a fresh cache dir and a store with an emulated round trip; the service's --disk is one byte smaller than the file, which is then never downloaded, so every request reads through (one ranged read from the store).\n" +
		"- `store-direct`: no service: the chunk read through `tablefile` over `store.ReaderAt` with the same emulated round trip, the index already in memory: what a client reading the store itself pays.\n" +
		"- `serve-memory`: the service as a user runs it: a `chunkd serve` child process (its own process, as nginx is) over the same store, every chunk in its memory tier.\n" +
		"- `nginx-cache`: no chunkd: nginx as a caching reverse proxy (`proxy_cache`, slice module) in front of the store, its cache warm; a client asks for the chunk's stored bytes as a byte range, as a user who only wants bytes near the database would. Measured when nginx is installed; see the section *chunkd vs nginx proxy_cache*.\n" +
		"- `nginx-same-size`: the same nginx asked for as many bytes as chunkd sends (the decoded chunk's size from the record's start: not a chunk), to tell the cost of bytes from the cost of serving.\n" +
		"- `grpc-*`: the same service paths over gRPC (with `--api grpc` or `both`).\n\n" +
		"Multipliers are against `bare-http` at the same client count."
	rep.Env.Set("service", "in-process: service.Start with HTTP on 127.0.0.1:0 and gRPC on 127.0.0.1:0; the clients run in the same process, so clients and service share the %d cores", rep.Env.Cores)
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
	svc   *service.Service
	url   string
	gconn *grpc.ClientConn
	gc    chunkpb.ChunkCacheClient
	tiers tierCounts // over measured phases
}

func startInproc(name string, cfg cache.Config) (*inproc, error) {
	svc, err := service.Start(service.Config{Cache: cfg, HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	s := &inproc{name: name, svc: svc, url: svc.URL(), tiers: tierCounts{}}
	s.gconn, err = grpc.NewClient(svc.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(api.MaxGRPCMessage)))
	if err != nil {
		svc.Close()
		return nil, err
	}
	s.gc = chunkpb.NewChunkCacheClient(s.gconn)
	return s, nil
}

func (s *inproc) close() {
	s.gconn.Close()
	s.svc.Close()
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
	h, err := cc.fetch(ctx, w, url, "", http.StatusOK, cc.size)
	return h.Get(api.HeaderTier), err
}

// getRange fetches the bytes of r from url; it returns nginx's cache
// status header.
func (cc *chunkClient) getRange(ctx context.Context, w int, url string, r byteRange) (string, error) {
	h, err := cc.fetch(ctx, w, url, r.header, http.StatusPartialContent, int(r.length))
	return h.Get("X-Cache-Status"), err
}

// fetch GETs url (with a Range header if rng is not ""), wanting status
// and want bytes, into worker w's buffer; it returns the headers.
func (cc *chunkClient) fetch(ctx context.Context, w int, url, rng string, status, want int) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := cc.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
			return nil, fmt.Errorf("GET %s: %s, want %d", url, resp.Status, status)
		}
		return nil, api.ReadError(resp)
	}
	if len(cc.bufs[w]) <= want { // worker w alone uses bufs[w]
		cc.bufs[w] = make([]byte, want+1)
	}
	n, err := io.ReadFull(resp.Body, cc.bufs[w])
	if err != io.ErrUnexpectedEOF && err != nil {
		return nil, err
	}
	if n != want {
		return nil, fmt.Errorf("got %d bytes, want %d", n, want)
	}
	return resp.Header, nil
}

// chunkPath is one way of getting a chunk, measured as a path.
type chunkPath struct {
	name string
	svc  *inproc // the in-process service; nil for the other paths
	// server, for a server in processes of its own (serve-memory,
	// nginx-*), returns their pids.
	server func() []string
	op     Op
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
// bare HTTP server; and, if nginx is installed, nginx caching the file.
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
	serve   *child     // chunkd serve, every chunk in memory; nil if it failed to start
	nginx   *nginxPeer // nil when nginx is absent or failed to start
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
	base := cache.Config{Store: rig.st, NoFsync: !cfg.Fsync}
	memCfg, diskCfg, missCfg := base, base, base
	memCfg.MemBytes = memBytes
	diskCfg.MemBytes = 1 // nothing fits: every chunk is read from the file
	missCfg.MemBytes = 1
	missCfg.Store = rig.slow
	missCfg.DiskBytes = rig.file.Size - 1 // the file never fits: every miss reads through
	for _, x := range []struct {
		name string
		c    cache.Config
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
	rig.startServe(ctx, r, memBytes)
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
	rig.startNginx(ctx, r)
	return nil
}

// startServe starts the serve-memory path's service, a "chunkd serve"
// child over the rig's store, and reads every chunk into its memory tier.
// If it fails, the report says so and the other paths go on.
func (rig *chunksRig) startServe(ctx context.Context, r *Runner, memBytes int64) {
	err := func() error {
		binary, how, err := serviceBinary(ctx, r)
		if err != nil {
			return err
		}
		dir := rig.cacheDir(r.Config, "serve")
		os.RemoveAll(dir)
		args := []string{"serve", "--store", filepath.Join(rig.dir, "store"), "--cache-dir", dir, "--listen", "127.0.0.1:0", "--grpc-listen", "",
			"--mem", strconv.FormatInt(memBytes, 10), "--fsync=" + strconv.FormatBool(r.Config.Fsync), "--log-level", "info"}
		if rig.serve, err = startChild(ctx, binary, args, nil, nil); err != nil {
			return err
		}
		r.Report.Env.Set("serve-memory's service", "child process `%s` (%s), the store without emulated latency (it only feeds the download)", shellquote.Join(append([]string{binary}, args...)), how)
		if _, err := rig.cc.get(ctx, 0, rig.serve.url+api.ChunkPath(chunksDB, rig.file.Addrs[0])); err != nil {
			return err
		}
		if err := waitDownloaded(ctx, r, rig.cc.hc, rig.serve, chunksDB, rig.file.Size); err != nil {
			return err
		}
		for pass := 0; pass < 2; pass++ {
			for _, a := range rig.file.Addrs {
				if _, err := rig.cc.get(ctx, 0, rig.serve.url+api.ChunkPath(chunksDB, a)); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if err != nil {
		r.Report.Notef("The serve-memory path (%s) was skipped: %v.", rig.cs, err)
		if rig.serve != nil {
			rig.serve.stop()
			rig.serve = nil
		}
	}
}

// startNginx starts the nginx peer over the rig's store (with the
// emulated round trip) and warms its cache. Without nginx, or if it fails,
// the report says so and the other paths go on.
func (rig *chunksRig) startNginx(ctx context.Context, r *Runner) {
	bin, version, err := nginxBinary(ctx)
	if err != nil {
		r.Report.Notef("The nginx-cache path was skipped: %v.", err)
		return
	}
	r.Logf("chunks %s: starting nginx %s with proxy_cache and slice %s, warming its cache", rig.cs, version, nginxSlice)
	p, err := startNginx(ctx, bin, version, filepath.Join(rig.dir, "nginx"), rig.slow, rig.file.Key, rig.file.Size)
	if err == nil {
		err = rig.warmNginx(ctx, p)
		if err != nil {
			p.close()
		}
	}
	if err != nil {
		r.Report.Notef("The nginx-cache path (%s) was skipped: %v.", rig.cs, err)
		return
	}
	rig.nginx = p
	r.Report.Env.Set("nginx", "nginx %s (%s), %d worker processes, proxy_cache on disk in the work dir, slice %s; its origin an HTTP server in this process answering each range with one ranged read of the store (%s)",
		version, bin, p.workers, nginxSlice, storeEmulation(r.Config.rtt(), r.Config.Bandwidth))
}

// byteRange is a range of the table file: where a chunk's bytes are.
type byteRange struct {
	off    uint64
	length uint32
	header string // the Range header asking for it, made once
}

func newByteRange(off uint64, length uint32) byteRange {
	return byteRange{off, length, fmt.Sprintf("bytes=%d-%d", off, off+uint64(length)-1)}
}

// nginxRanges are what the nginx paths ask for, per chunk: its record
// (nginx-cache), or as many bytes as the decoded chunk from the record's
// start, moved back to end within the file where they would pass its end
// (nginx-same-size: not a chunk, the bytes chunkd sends).
func (rig *chunksRig) nginxRanges(sameSize bool) (map[addr.Addr]byteRange, error) {
	out := make(map[addr.Addr]byteRange, len(rig.file.Addrs))
	for _, a := range rig.file.Addrs {
		e, ok := rig.tf.Lookup(a)
		if !ok {
			return nil, fmt.Errorf("chunk %s is not in the file's index", a)
		}
		r := newByteRange(e.Offset, e.Length)
		if sameSize {
			r = newByteRange(min(e.Offset, uint64(rig.file.Size)-uint64(rig.size)), uint32(rig.size))
		}
		out[a] = r
	}
	return out, nil
}

// warmNginx reads every range of both nginx paths through nginx twice:
// the first pass fills its cache, the second must be served from it.
func (rig *chunksRig) warmNginx(ctx context.Context, p *nginxPeer) error {
	for _, sameSize := range []bool{false, true} {
		ranges, err := rig.nginxRanges(sameSize)
		if err != nil {
			return err
		}
		for pass := 0; pass < 2; pass++ {
			for _, a := range rig.file.Addrs {
				r := ranges[a]
				status, err := rig.cc.getRange(ctx, 0, p.url, r)
				if err != nil {
					return fmt.Errorf("nginx: %w", err)
				}
				if pass == 1 && status != "HIT" {
					return fmt.Errorf("nginx: a warm read of bytes %d-%d was a cache %s", r.off, r.off+uint64(r.length)-1, status)
				}
			}
		}
	}
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
		if err := s.svc.Cache.WaitCached(ctx, chunksDB, 2*time.Minute, nil); err != nil {
			return fmt.Errorf("%s service: %w", s.name, err)
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
	if rig.nginx != nil {
		rig.nginx.close()
	}
	if rig.serve != nil {
		rig.serve.stop()
		if !cfg.Keep {
			os.RemoveAll(rig.cacheDir(cfg, "serve"))
		}
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
	if s := rig.serve; s != nil {
		paths = append(paths, chunkPath{name: "serve-memory", server: func() []string { return []string{s.pid} }, op: func(ctx context.Context, w int, rng *rand.Rand) error {
			tier, err := cc.get(ctx, w, s.url+api.ChunkPath(chunksDB, pickAddr(rng)))
			if err != nil {
				return err
			}
			if tier != api.TierMemory.String() {
				return fmt.Errorf("served from %q, want %s", tier, api.TierMemory)
			}
			return nil
		}})
	}
	if p := rig.nginx; p != nil {
		for _, sameSize := range []bool{false, true} {
			ranges, _ := rig.nginxRanges(sameSize) // warmNginx read every one
			name := map[bool]string{false: "nginx-cache", true: "nginx-same-size"}[sameSize]
			paths = append(paths, chunkPath{name: name, server: p.pids, op: func(ctx context.Context, w int, rng *rand.Rand) error {
				r := ranges[pickAddr(rng)]
				status, err := cc.getRange(ctx, w, p.url, r)
				if err != nil {
					return err
				}
				if status != "HIT" {
					return fmt.Errorf("nginx answered a warm range with cache status %q, want HIT", status)
				}
				return nil
			}})
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
	cpuSelf   map[chunkKey][]float64 // CPU µs of this process (clients, and the in-process services) per op, per run
	server    map[chunkKey][]usage   // the server's own processes, per op, per run (serve-memory, nginx-*)
	failed    map[chunkKey]error
}

// measureChunks drives every path with every client count, runs
// outermost, so each path's runs are spread over time.
func measureChunks(ctx context.Context, r *Runner, rig *chunksRig, paths []chunkPath, clients []int, load Load) (*chunkRuns, error) {
	cfg, rep, cs := r.Config, r.Report, rig.cs
	m := &chunkRuns{stats: map[chunkKey][]Stats{}, syscr: map[chunkKey][]float64{}, rchar: map[chunkKey][]float64{},
		diskReads: map[chunkKey][]float64{}, cpuSelf: map[chunkKey][]float64{}, server: map[chunkKey][]usage{}, failed: map[chunkKey]error{}}
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
				var self0, srv0 usage
				var uErr error
				l := load
				l.Clients = c
				l.Mark = func() {
					if p.svc != nil {
						before, _ = scrapeMetrics(ctx, rig.cc.hc, p.svc.url+"/metrics")
					}
					io0, ioErr = readProcIO("self")
					self0, srv0, uErr = markUsage(p.server)
				}
				s, err := Drive(ctx, l, p.op)
				if err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					m.failed[k] = err
					rep.Notef("%s %s with %d %s failed in run %d: %v", cs, p.name, c, english.PluralWord(c, "client", ""), run, err)
					continue
				}
				io1, ioErr1 := readProcIO("self")
				self1, srv1, uErr1 := markUsage(p.server)
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
				if uErr == nil && uErr1 == nil && st.Count > 0 {
					m.cpuSelf[k] = append(m.cpuSelf[k], self1.sub(self0).per(st.Count).cpuUS)
					if p.server != nil {
						m.server[k] = append(m.server[k], srv1.sub(srv0).per(st.Count))
					}
				}
				m.stats[k] = append(m.stats[k], st)
				if c == clients[0] {
					rep.Samples(cs, p.name, c, s.Lat)
				}
				r.Logf("chunks %s: run %d/%d %-15s %2d %s: p50 %s µs, p99 %s µs, %s ops/s", cs, run, cfg.Runs, p.name, c, english.PluralWord(c, "client", ""),
					fmtUS(us(st.P50)), fmtUS(us(st.P99)), fmtRate(st.Throughput))
			}
		}
	}
	return m, nil
}

// usage is what processes have used: CPU time in µs, and read and
// write calls with the bytes written (sockets included); so far, or per
// operation.
type usage struct {
	cpuUS, syscr, syscw, wchar float64
}

// usageOf sums the usage of the processes pids so far.
func usageOf(pids []string) (usage, error) {
	var u usage
	for _, pid := range pids {
		cpu, err := processCPU(pid)
		if err != nil {
			return u, err
		}
		io, err := readProcIO(pid)
		if err != nil {
			return u, err
		}
		u.cpuUS += us(cpu)
		u.syscr += float64(io.Syscr)
		u.syscw += float64(io.Syscw)
		u.wchar += float64(io.Wchar)
	}
	return u, nil
}

func (a usage) sub(b usage) usage {
	return usage{a.cpuUS - b.cpuUS, a.syscr - b.syscr, a.syscw - b.syscw, a.wchar - b.wchar}
}

func (a usage) per(n int64) usage {
	f := float64(n)
	return usage{a.cpuUS / f, a.syscr / f, a.syscw / f, a.wchar / f}
}

// markUsage reads the usage of this process, and of the server's
// processes if server is not nil.
func markUsage(server func() []string) (self, srv usage, err error) {
	if self, err = usageOf([]string{"self"}); err != nil || server == nil {
		return self, srv, err
	}
	srv, err = usageOf(server())
	return self, srv, err
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
	m.reportNginx(rep, rig, clients)
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

// The nginx comparison's goals: chunkd's p50 at goalP50Clients at or
// below nginx's, and its throughput at goalRateClients at or above.
const (
	goalP50Clients  = 1
	goalRateClients = 8
)

// reportNginx adds the section comparing chunkd's HTTP paths with nginx's
// proxy_cache: latency and throughput side by side, the goals, and the
// CPU each spends per request.
func (m *chunkRuns) reportNginx(rep *Report, rig *chunksRig, clients []int) {
	cs := rig.cs
	title := "chunkd vs nginx proxy_cache (" + cs + ")"
	const ng = "nginx-cache"
	if rig.nginx == nil {
		rep.Section(title, "Not measured: nginx was not there or did not start (see the notes). Install nginx with the slice module (Debian's has it) to measure it.")
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nginx %s as a caching reverse proxy in front of the store (`proxy_cache` on disk, `slice %s`, %d workers, no access log, sendfile, open file cache; "+
		"its cache warm: every chunk's range read twice before measuring, and every measured answer had to be a cache `HIT`). "+
		"A client asks nginx for a chunk's **stored** bytes as a byte range, as a user with no chunkd would: the compressed record with its CRC, %.0f bytes on average, unverified. "+
		"chunkd answers with the **decoded** chunk (%s), proven to hash to its address (when its file was downloaded; a disk hit also checks the record's CRC and decodes it). "+
		"So nginx sends fewer bytes here, and the comparison is about the cost of serving; `nginx-same-size` asks nginx for as many bytes as chunkd sends (a range of the decoded chunk's size from the record's start: not a chunk), to tell the cost of the bytes from the cost of serving. "+
		"`serve-memory` is chunkd as a user runs it, a process of its own as nginx is; `http-memory` and `http-disk` are the service inside this process, sharing its Go runtime with the clients. "+
		"Figures are medians over runs; *runs* gives the lowest and highest of the runs' own ratios (each run measures every path at about the same time). "+
		"CPU is per request, from /proc/PID/stat (10 ms ticks): of this process (the clients, and the in-process services), and of all processes (adding the server's own: chunkd serve, or nginx's master and workers). "+
		"On a machine shared with other work, ops/s measures the share of the cores the paths' processes got as much as their cost (the in-process paths are one process of %d threads; the others add the server's processes); "+
		"requests per CPU second (1 ÷ the CPU of all processes per request) does not depend on that share, and its ratio to nginx's is in the last column.\n\n",
		rig.nginx.version, nginxSlice, rig.nginx.workers, float64(rig.tf.DataEnd())/float64(rig.n), cs, runtime.GOMAXPROCS(0))

	chunkd := []string{"serve-memory", "http-memory", "http-disk"}
	fmt.Fprintf(&b, "| clients | path | p50 µs | p50 × nginx | ops/s | ops/s × nginx | CPU µs/req, this process | CPU µs/req, all | req per CPU-s × nginx | spread |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range clients {
		nr := Summarize("", cs, ng, c, m.stats[chunkKey{ng, c}])
		ngAll := m.cpuAll(chunkKey{ng, c})
		for _, path := range append([]string{ng, "nginx-same-size", "bare-http"}, chunkd...) {
			k := chunkKey{path, c}
			if len(m.stats[k]) == 0 {
				continue
			}
			r := Summarize("", cs, path, c, m.stats[k])
			all := m.cpuAll(k)
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %.1f | %.1f | %s | %.0f%% |\n", c, path, fmtUS(r.P50US), ratio(r.P50US, nr.P50US),
				fmtRate(r.Throughput), ratio(r.Throughput, nr.Throughput), median(m.cpuSelf[k]), all, ratio(ngAll, all), r.SpreadPct)
			rep.Metric(cs, path, c, "cpu_us_per_request_self", median(m.cpuSelf[k]))
			rep.Metric(cs, path, c, "cpu_us_per_request_all", all)
		}
	}

	fmt.Fprintf(&b, "\nThe goals: chunkd's p50 at %d client at or below nginx's, and its throughput at %d clients at or above.\n\n", goalP50Clients, goalRateClients)
	b.WriteString("| goal | chunkd path | chunkd | nginx | chunkd ÷ nginx | runs | met? |\n|---|---|--:|--:|--:|--:|---|\n")
	stat := func(f func(Stats) float64) func(chunkKey) []float64 {
		return func(k chunkKey) []float64 {
			var xs []float64
			for _, s := range m.stats[k] {
				xs = append(xs, f(s))
			}
			return xs
		}
	}
	for _, g := range []struct {
		name    string
		clients int
		metric  string
		runs    func(chunkKey) []float64 // the figure per run
		lower   bool                     // lower is better
		unit    string
	}{
		{fmt.Sprintf("p50 at %d client", goalP50Clients), goalP50Clients, "p50_over_nginx", stat(func(s Stats) float64 { return us(s.P50) }), true, "µs"},
		{fmt.Sprintf("ops/s at %d clients", goalRateClients), goalRateClients, "throughput_over_nginx", stat(func(s Stats) float64 { return s.Throughput }), false, "ops/s"},
		{fmt.Sprintf("(the same, as req per CPU-s at %d clients)", goalRateClients), goalRateClients, "requests_per_cpu_second_over_nginx", m.perCPUSecond, false, "req/CPU-s"},
	} {
		for _, path := range chunkd {
			cv, nv := g.runs(chunkKey{path, g.clients}), g.runs(chunkKey{ng, g.clients})
			if len(cv) == 0 || len(nv) == 0 {
				fmt.Fprintf(&b, "| %s | %s | | | | | not measured (clients %s) |\n", g.name, path, intList(clients))
				continue
			}
			var rs []float64
			for i := 0; i < min(len(cv), len(nv)); i++ {
				rs = append(rs, cv[i]/nv[i])
			}
			x := median(cv) / median(nv)
			verdict := "**yes**"
			if g.lower && x > 1 {
				verdict = "no: " + percent(x-1) + " slower"
			} else if !g.lower && x < 1 {
				verdict = "no: " + percent(1-x) + " fewer"
			}
			fmt.Fprintf(&b, "| %s | %s | %s %s | %s %s | **%.2f** | %.2f–%.2f | %s |\n", g.name, path,
				fmtFig(median(cv)), g.unit, fmtFig(median(nv)), g.unit, x, slices.Min(rs), slices.Max(rs), verdict)
			rep.Metric(cs, path, g.clients, g.metric, x)
		}
	}
	m.servers(&b, rep, cs, clients)
	m.whereCPUGoes(&b, goalRateClients)
	rep.Section(title, b.String())
}

// cpuAllRuns is, per run, the CPU µs per request of every process on
// path k: this one, and the server's own if it has any.
func (m *chunkRuns) cpuAllRuns(k chunkKey) []float64 {
	self, srv := m.cpuSelf[k], m.server[k]
	var xs []float64
	for i := range self {
		x := self[i]
		if len(srv) > 0 {
			if i >= len(srv) {
				break
			}
			x += srv[i].cpuUS
		}
		xs = append(xs, x)
	}
	return xs
}

// cpuAll is the median over runs of cpuAllRuns.
func (m *chunkRuns) cpuAll(k chunkKey) float64 { return median(m.cpuAllRuns(k)) }

// perCPUSecond is, per run, the requests path k serves per second of CPU
// of all its processes.
func (m *chunkRuns) perCPUSecond(k chunkKey) []float64 {
	var xs []float64
	for _, x := range m.cpuAllRuns(k) {
		if x > 0 {
			xs = append(xs, 1e6/x)
		}
	}
	return xs
}

// servers is the table of what the servers in processes of their own
// spent per request: CPU, read and write calls, bytes written.
func (m *chunkRuns) servers(b *strings.Builder, rep *Report, cs string, clients []int) {
	b.WriteString("\nThe servers in processes of their own, per request (from /proc/PID/stat and /proc/PID/io of chunkd serve, or of nginx's master and workers; medians over runs; calls on sockets included, sendfile counted as a write):\n\n" +
		"| clients | path | CPU µs | read calls | write calls | bytes written |\n|--:|---|--:|--:|--:|--:|\n")
	for _, c := range clients {
		for _, path := range []string{"nginx-cache", "nginx-same-size", "serve-memory"} {
			k := chunkKey{path, c}
			runs := m.server[k]
			if len(runs) == 0 {
				continue
			}
			col := func(f func(usage) float64) float64 {
				xs := make([]float64, len(runs))
				for i, u := range runs {
					xs[i] = f(u)
				}
				return median(xs)
			}
			u := usage{col(func(u usage) float64 { return u.cpuUS }), col(func(u usage) float64 { return u.syscr }),
				col(func(u usage) float64 { return u.syscw }), col(func(u usage) float64 { return u.wchar })}
			fmt.Fprintf(b, "| %d | %s | %.1f | %.2f | %.2f | %.0f |\n", c, path, u.cpuUS, u.syscr, u.syscw, u.wchar)
			rep.Metric(cs, path, c, "server_cpu_us_per_request", u.cpuUS)
			rep.Metric(cs, path, c, "server_read_calls_per_request", u.syscr)
			rep.Metric(cs, path, c, "server_write_calls_per_request", u.syscw)
			rep.Metric(cs, path, c, "server_bytes_written_per_request", u.wchar)
		}
	}
}

// whereCPUGoes says what a request costs in CPU at c clients, where
// every core is busy and throughput is the cores' time over that cost.
func (m *chunkRuns) whereCPUGoes(b *strings.Builder, c int) {
	self := func(path string) (float64, bool) {
		v := m.cpuSelf[chunkKey{path, c}]
		return median(v), len(v) > 0
	}
	server := func(path string) (float64, bool) {
		var xs []float64
		for _, u := range m.server[chunkKey{path, c}] {
			xs = append(xs, u.cpuUS)
		}
		return median(xs), len(xs) > 0
	}
	clients, ok := self("nginx-cache")
	if !ok {
		return
	}
	fmt.Fprintf(b, "\nWhere the CPU goes at %d %s (the cores are busy, so throughput is about the cores' time over a request's CPU, clients included): ", c, english.PluralWord(c, "client", ""))
	ng, _ := server("nginx-cache")
	fmt.Fprintf(b, "nginx spends %.1f µs a request, its clients %.1f", ng, clients)
	if v, ok := server("nginx-same-size"); ok {
		cl, _ := self("nginx-same-size")
		fmt.Fprintf(b, "; nginx sending chunkd's number of bytes %.1f µs, its clients %.1f", v, cl)
	}
	if v, ok := server("serve-memory"); ok {
		cl, _ := self("serve-memory")
		fmt.Fprintf(b, "; chunkd serve %.1f µs (memory hits), its clients %.1f", v, cl)
	}
	var in []string
	for _, path := range []string{"bare-http", "http-memory", "http-disk"} {
		if v, ok := self(path); ok {
			in = append(in, fmt.Sprintf("%s %.1f", path, v-clients))
		}
	}
	if len(in) > 0 {
		fmt.Fprintf(b, "; the in-process servers, estimated as this process's CPU less the clients' on the nginx-cache path: %s µs", strings.Join(in, ", "))
	}
	b.WriteString(". bare-http is Go's net/http with a handler that writes fixed bytes: the floor under any chunkd HTTP path.\n")
}

// percent formats a fraction as a percentage, with a decimal under 10%.
func percent(f float64) string {
	if f < 0.1 {
		return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(f*100, 'f', 0, 64) + "%"
}

// fmtFig formats a latency or a rate for a table.
func fmtFig(v float64) string {
	if v < 1000 {
		return fmtUS(v)
	}
	return humanize.Comma(int64(v + 0.5))
}
