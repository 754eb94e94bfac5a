package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/shellquote"
	"github.com/dustin/go-humanize"
	"github.com/dustin/go-humanize/english"
)

const bigdataDB = "bigdata"

// bigdataRun is one measured phase's counters.
type bigdataRun struct {
	stats     Stats
	io        procIO     // of the service process
	tiers     tierCounts // chunks served per tier
	diskReads float64    // the service's own count
	gcs       float64    // garbage collections
}

// runBigdata is YugabyteDB's uncached random-read test at our scale: a
// data set several times the service's memory, uniform random reads from
// many clients, and the question whether each read costs exactly one disk
// read (index and bloom filter always in memory).
func runBigdata(ctx context.Context, r *Runner) error {
	cfg := r.Config
	rep := r.Report
	rig := &bigdataRig{chunkSize: 16 << 10, data: cfg.DataBytes, mem: cfg.MemBytes, limit: cfg.CgroupMem}
	if rig.data <= 0 {
		rig.data = pick[int64](cfg.Scale, 24<<20, 512<<20, 8<<30)
	}
	if rig.mem <= 0 {
		rig.mem = pick[int64](cfg.Scale, 4<<20, 64<<20, 1<<30)
	}
	if len(cfg.Sizes) > 0 {
		rig.chunkSize = cfg.Sizes[0]
	}
	if rig.limit <= 0 {
		rig.limit = 2*rig.mem + 64<<20 // Go's heap runs to about twice the live data
	}
	clients := cfg.clients([]int{1, 8}, []int{1, 32}, []int{1, 16, 64, 128})
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 100*time.Millisecond, time.Second, 5*time.Second),
		Duration: pick(cfg.Scale, 300*time.Millisecond, 4*time.Second, 20*time.Second),
	})

	rep.Intro = fmt.Sprintf("YugabyteDB's uncached random-read test at our scale: a data set of %s of table files (%s of chunks) "+
		"served by a `chunkd serve` process given %s of memory for chunks, so most reads cannot be memory hits; "+
		"clients in this process read uniformly random chunks of it over HTTP. "+
		"The question is whether a chunk that is not in memory costs exactly **one** disk read: the service keeps every index and bloom filter in memory.\n\n"+
		"- `uniform`: uniformly random addresses over the whole data set.\n"+
		"- `memory`: the same clients on a small hot set that stays in the memory tier: the baseline for the service's socket reads, and the multiplier's base.\n\n"+
		"**Disk reads per read** = (read syscalls of the service process during `uniform`, from /proc/PID/io syscr, minus `memory`'s syscr per request × requests) / chunks the service served from disk; "+
		"the headline figure uses batches of 64 addresses per request, which dilute the socket reads (see below). "+
		"Device bytes per read comes from read_bytes, the bytes the block layer really fetched for the process.",
		humanize.IBytes(uint64(rig.data)), "about "+humanize.IBytes(uint64(rig.data*2)), humanize.IBytes(uint64(rig.mem)))

	defer rig.close(r)
	if err := rig.prepare(ctx, r, max(1, slices.Max(clients))); err != nil {
		return err
	}
	m, err := rig.measure(ctx, r, clients, load)
	if err != nil {
		return err
	}
	rig.report(rep, m, clients)
	if pm, err := scrapeMetrics(ctx, rig.cc.hc, rig.svc.url+"/metrics"); err == nil {
		ratio := pm["chunkd_store_bytes_per_served_byte"]
		rep.Env.Set("store bytes per byte served", "%.3f (the service's chunkd_store_bytes_per_served_byte over the whole run: downloads, read-through and index loads, per decoded chunk byte served)", ratio)
		rep.Metric(m.cs, "", 0, "store_bytes_per_served_byte", ratio)
	}
	return nil
}

// bigdataRig is a data set in a folder store and a service over it, in a
// cgroup where one can be made, that has downloaded all of it.
type bigdataRig struct {
	chunkSize int
	data      int64 // table-file bytes in the data set
	mem       int64 // the service's --mem
	limit     int64 // its cgroup's memory limit

	ds       *dataset
	all      []addr.Addr // every chunk
	cacheDir string      // the service's
	cg       *cgroup     // nil for none
	svc      *child
	cc       *chunkClient
}

// prepare writes (or finds) the data set, starts the service, has it
// download every file, and drops the files from the page cache.
func (rig *bigdataRig) prepare(ctx context.Context, r *Runner, maxClients int) error {
	cfg, rep := r.Config, r.Report
	// Disk space: the store's copy and the cache's copy, on one file
	// system or two.
	storeDir := filepath.Join(r.WorkDir, "store")
	rig.cacheDir = filepath.Join(cfg.CacheDir, "chunkd-bench-bigdata")
	storeNeed, cacheNeed := rig.data+rig.data/16+64<<20, rig.data+rig.data/16+64<<20
	if ds, err := loadDataset(storeDir); err == nil && ds.Target == rig.data {
		storeNeed = 64 << 20
	}
	if err := checkSpace(r.WorkDir, storeNeed, cfg.CacheDir, cacheNeed); err != nil {
		return fmt.Errorf("bigdata: %w", err)
	}

	ds, err := makeDataset(ctx, r, storeDir, bigdataDB, rig.data, rig.chunkSize, pick[int64](cfg.Scale, 8<<20, 64<<20, 256<<20))
	if err != nil {
		return err
	}
	rig.ds, rig.all = ds, ds.all()
	rep.Env.Set("data set", "%d table files, %d chunks of %s (half random, about 2:1 under snappy): %s stored, %s of chunks; %s",
		len(ds.Files), ds.Chunks, sizeName(rig.chunkSize), humanize.IBytes(uint64(ds.StoredBytes)), humanize.IBytes(uint64(ds.DecodedBytes)),
		map[bool]string{true: "reused from an earlier run", false: "written for this run"}[ds.Reused])
	rep.Env.Set("store", "local folder (file://) %s, no emulated latency (it only feeds the downloads)", storeDir)
	rep.Env.Set("fsync", "%s (the service fsyncs downloaded files before serving them)", onOff(cfg.Fsync))

	binary, how, err := serviceBinary(ctx, r)
	if err != nil {
		return err
	}
	rep.Env.Set("service", "child process `%s serve` (%s); clients in the bench process, over loopback HTTP/1.1 keep-alive", binary, how)
	env := rig.limitMemory(r)
	disk := 2*ds.StoredBytes + 1<<30
	args := []string{"serve", "--store", storeDir, "--cache-dir", rig.cacheDir, "--listen", "127.0.0.1:0", "--grpc-listen", "",
		"--mem", strconv.FormatInt(rig.mem, 10), "--disk", strconv.FormatInt(disk, 10),
		"--fsync=" + strconv.FormatBool(cfg.Fsync), "--log-level", "info"}
	r.Logf("bigdata: starting %s", shellquote.Join(append([]string{binary}, args...)))
	if rig.svc, err = startChild(ctx, binary, args, env, rig.cg); err != nil {
		return err
	}
	rep.Env.Set("cache sizes", "--mem %s (memory tier, decoded chunks), --disk %s", humanize.IBytes(uint64(rig.mem)), humanize.IBytes(uint64(disk)))
	rig.cc = newChunkClient(maxClients, rig.chunkSize)
	if err := waitReady(ctx, rig.cc.hc, rig.svc.url+"/readyz", 30*time.Second); err != nil {
		return err
	}

	// Download every file: ask for one chunk of each, then wait.
	start := time.Now()
	for i := range ds.Files {
		if _, err := rig.get(ctx, 0, ds.addrs[i][0]); err != nil {
			return fmt.Errorf("first read of file %d: %w:\n%s", i, err, rig.svc.tail(10))
		}
	}
	if err := waitDownloaded(ctx, r, rig.cc.hc, rig.svc, bigdataDB, ds.StoredBytes); err != nil {
		return err
	}
	rep.Env.Set("download", "%d files downloaded by the service in %s before measuring", len(ds.Files), time.Since(start).Round(time.Millisecond))
	// Start cold: drop the cached files from the page cache.
	dropped := 0
	filepath.WalkDir(rig.cacheDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && dropCache(p) == nil {
			dropped++
		}
		return nil
	})
	rep.Env.Set("page cache", "the %d cached files' pages dropped (posix_fadvise DONTNEED) before the first read", dropped)
	return nil
}

// limitMemory puts the service in a cgroup with the memory limit, unless
// Config.NoCgroup or none can be made (the report says which), and
// returns the service's environment.
func (rig *bigdataRig) limitMemory(r *Runner) (env []string) {
	rep, mem := r.Report, humanize.IBytes(uint64(rig.mem))
	if r.Config.NoCgroup {
		rep.Notef("--no-cgroup: the service's memory was bounded by --mem only; the page cache could hold the whole data set, so device reads (read_bytes) may be near zero and latencies those of page-cache reads.")
		rep.Env.Set("memory limit", "--mem %s only (no cgroup: --no-cgroup)", mem)
		return nil
	}
	cg, err := newCgroup(fmt.Sprintf("chunkd-bench-%d", os.Getpid()), rig.limit)
	if err != nil {
		rep.Notef("No cgroup memory limit could be set (%v): the service's memory was bounded by --mem only; the page cache could hold the whole data set, so device reads (read_bytes) may be near zero and latencies those of page-cache reads.", err)
		rep.Env.Set("memory limit", "--mem %s only (no writable cgroup: %v)", mem, err)
		return nil
	}
	rig.cg = cg
	gomem := rig.limit - rig.limit/8
	rep.Env.Set("memory limit", "--mem %s in a %s (page cache included), GOMEMLIMIT=%s", mem, cg.describe(), humanize.IBytes(uint64(gomem)))
	return []string{"GOMEMLIMIT=" + strconv.FormatInt(gomem, 10)}
}

func (rig *bigdataRig) close(r *Runner) {
	if rig.cc != nil {
		rig.cc.hc.CloseIdleConnections()
	}
	if rig.svc != nil {
		if err := rig.svc.stop(); err != nil {
			r.Report.Notef("The service did not stop cleanly: %v", err)
		}
	}
	if rig.cacheDir != "" && !r.Config.Keep {
		os.RemoveAll(rig.cacheDir)
	}
	if rig.cg != nil {
		rig.cg.remove()
	}
}

// get reads chunk a from the service into worker w's buffer, and returns
// the tier that served it.
func (rig *bigdataRig) get(ctx context.Context, w int, a addr.Addr) (string, error) {
	return rig.cc.get(ctx, w, rig.svc.url+api.ChunkPath(bigdataDB, a))
}

// bigdataRuns is what measure measured.
type bigdataRuns struct {
	cs       string
	runs     map[chunkKey][]bigdataRun // memory and uniform, per client count
	batches  [][2]bigdataRun           // per run: memory, uniform
	batchDur time.Duration             // of a batched phase
	allTiers tierCounts                // over the uniform phases
	hot      []addr.Addr               // the memory baseline's chunks
	hotTiers [4]atomic.Int64           // where they were served from, by tiers
}

// batchSize is the chunks per request of the batched phases.
const batchSize = 64

// measure runs, per run: for each client count, the memory baseline on
// the hot set and the uniform reads; then the batched pair.
func (rig *bigdataRig) measure(ctx context.Context, r *Runner, clients []int, load Load) (*bigdataRuns, error) {
	cfg := r.Config
	all, svc := rig.all, rig.svc
	m := &bigdataRuns{cs: "uniform-" + sizeName(rig.chunkSize), runs: map[chunkKey][]bigdataRun{}, allTiers: tierCounts{},
		batchDur: pick(cfg.Scale, 300*time.Millisecond, 2*time.Second, 5*time.Second),
		hot:      all[:min(len(all), max(16, int(rig.mem/4/int64(rig.chunkSize))))]}
	uniform := func(ctx context.Context, w int, rng *rand.Rand) error {
		_, err := rig.get(ctx, w, all[rng.IntN(len(all))])
		return err
	}
	memoryOp := func(ctx context.Context, w int, rng *rand.Rand) error {
		tier, err := rig.get(ctx, w, m.hot[rng.IntN(len(m.hot))])
		if err == nil {
			for i, t := range tiers {
				if t == tier {
					m.hotTiers[i].Add(1)
				}
			}
		}
		return err
	}
	maxClients := max(1, slices.Max(clients))
	initialWarmup := pick(cfg.Scale, 300*time.Millisecond, 5*time.Second, 60*time.Second)
	r.Logf("bigdata: initial warm-up: %s of uniform reads with %d clients", initialWarmup, maxClients)
	if _, err := Drive(ctx, Load{Clients: maxClients, Duration: initialWarmup}, uniform); err != nil {
		return nil, fmt.Errorf("warm-up: %w:\n%s", err, svc.tail(10))
	}

	baseLoad := Load{Warmup: load.Warmup / 2, Duration: max(load.Duration/4, 100*time.Millisecond)}
	var lat1, mlat1 []time.Duration
	for run := 1; run <= cfg.Runs; run++ {
		for _, c := range clients {
			// The memory baseline: warm the hot set, then measure it.
			for _, a := range m.hot {
				if _, err := rig.get(ctx, 0, a); err != nil {
					return nil, err
				}
			}
			bl := baseLoad
			bl.Clients = c
			mr, msamples, err := rig.phase(ctx, bl, memoryOp)
			if err != nil {
				return nil, fmt.Errorf("memory baseline: %w:\n%s", err, svc.tail(10))
			}
			m.runs[chunkKey{"memory", c}] = append(m.runs[chunkKey{"memory", c}], mr)
			ul := load
			ul.Clients = c
			ur, samples, err := rig.phase(ctx, ul, uniform)
			if err != nil {
				return nil, fmt.Errorf("uniform reads: %w:\n%s", err, svc.tail(10))
			}
			if c == clients[0] {
				lat1 = append(lat1, samples...)
				mlat1 = append(mlat1, msamples...)
			}
			m.runs[chunkKey{"uniform", c}] = append(m.runs[chunkKey{"uniform", c}], ur)
			for _, t := range tiers {
				m.allTiers[t] += ur.tiers[t]
			}
			base := float64(mr.io.Syscr) / float64(max(1, mr.stats.Count))
			d := ur.tiers["disk"] + ur.tiers["partial"]
			r.Logf("bigdata: run %d/%d %3d %s: %s ops/s, avg %s µs, p99 %s µs; %.2f disk reads per disk-served read; %s",
				run, cfg.Runs, c, english.PluralWord(c, "client", ""), fmtRate(ur.stats.Throughput), fmtUS(us(ur.stats.Mean)), fmtUS(us(ur.stats.P99)),
				(float64(ur.io.Syscr)-base*float64(ur.stats.Count))/math.Max(d, 1), ur.tiers)
			if exited, werr := svc.exited(); exited {
				return nil, fmt.Errorf("the service exited (%v):\n%s", werr, svc.tail(20))
			}
		}
		// Batched accounting: one client asking for 64 random chunks per
		// request, so the socket reads (which vary by one or two per
		// request with timing) are spread over some 60 disk reads.
		pl := Load{Clients: 1, Duration: m.batchDur}
		pm, _, err := rig.phase(ctx, pl, rig.batchOp(m.hot))
		if err != nil {
			return nil, fmt.Errorf("batched memory baseline: %w", err)
		}
		pu, _, err := rig.phase(ctx, pl, rig.batchOp(all))
		if err != nil {
			return nil, fmt.Errorf("batched uniform reads: %w", err)
		}
		m.batches = append(m.batches, [2]bigdataRun{pm, pu})
		r.Logf("bigdata: run %d/%d batched, 1 client, %d chunks per request: %.3f disk reads per disk-served read", run, cfg.Runs, batchSize, batchPerDisk(pm, pu))
	}
	r.Report.Samples(m.cs, "memory", clients[0], mlat1)
	r.Report.Samples(m.cs, "uniform", clients[0], lat1)
	return m, nil
}

// phase drives l with op and returns its figures with the service's
// counters over the measured part: its read syscalls and bytes, the
// tiers that served the chunks, its own count of disk reads, and its
// garbage collections.
func (rig *bigdataRig) phase(ctx context.Context, l Load, op Op) (bigdataRun, []time.Duration, error) {
	svc, hc := rig.svc, rig.cc.hc
	var b0 promSamples
	var io0 procIO
	var e0 error
	l.Mark = func() {
		b0, e0 = scrapeMetrics(ctx, hc, svc.url+"/metrics")
		if e0 == nil {
			io0, e0 = readProcIO(svc.pid)
		}
	}
	s, err := Drive(ctx, l, op)
	if err != nil {
		return bigdataRun{}, nil, err
	}
	if e0 != nil {
		return bigdataRun{}, nil, e0
	}
	io1, err := readProcIO(svc.pid)
	if err != nil {
		return bigdataRun{}, nil, err
	}
	b1, err := scrapeMetrics(ctx, hc, svc.url+"/metrics")
	if err != nil {
		return bigdataRun{}, nil, err
	}
	t := tierCounts{}
	t.add(b1, b0)
	return bigdataRun{stats: s.Stats(), io: io1.sub(io0), tiers: t, diskReads: b1.diskReads() - b0.diskReads(),
		gcs: b1["go_gc_duration_seconds_count"] - b0["go_gc_duration_seconds_count"]}, s.Lat, nil
}

// batchOp asks for batchSize random chunks of set in one request (POST
// to the batch path) and checks every frame.
func (rig *bigdataRig) batchOp(set []addr.Addr) Op {
	return func(ctx context.Context, w int, rng *rand.Rand) error {
		batch := make([]addr.Addr, batchSize)
		for i := range batch {
			batch[i] = set[rng.IntN(len(set))]
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rig.svc.url+api.ChunksPath(bigdataDB), bytes.NewReader(api.EncodeAddresses(batch)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", api.ContentTypeBinary)
		resp, err := rig.cc.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return api.ReadError(resp)
		}
		n := 0
		for f, err := range api.NewFrameReader(resp.Body).All() {
			if err != nil {
				return err
			}
			if !f.Found || len(f.Data) != rig.chunkSize {
				return fmt.Errorf("batch frame %d: found %v, %d bytes", f.Index, f.Found, len(f.Data))
			}
			n++
		}
		if n != batchSize {
			return fmt.Errorf("batch: %d frames for %d addresses", n, batchSize)
		}
		return nil
	}
}

// report adds the results, the section on disk reads per read (the
// batched headline, then the table per client count) and the service's
// hit ratios and memory.
func (rig *bigdataRig) report(rep *Report, m *bigdataRuns, clients []int) {
	cs := m.cs
	for _, p := range []string{"memory", "uniform"} {
		for _, c := range clients {
			var st []Stats
			for _, x := range m.runs[chunkKey{p, c}] {
				st = append(st, x.stats)
			}
			rep.Add(Summarize("bigdata", cs, p, c, st))
		}
	}

	avgStored := float64(rig.ds.RecordBytes) / float64(rig.ds.Chunks) // a chunk's record in its file
	var b strings.Builder
	m.batched(&b, rep, avgStored)
	m.perClients(&b, rep, clients, avgStored)
	var hotTotal, hotMem int64
	for i := range m.hotTiers {
		hotTotal += m.hotTiers[i].Load()
	}
	hotMem = m.hotTiers[0].Load()
	if hotTotal > 0 {
		fmt.Fprintf(&b, "\nThe memory baseline's hot set (%d chunks) was served from memory for %.1f%% of its requests.\n", len(m.hot), float64(hotMem)/float64(hotTotal)*100)
	}
	rep.Section("Disk reads per read", b.String())
	rep.Env.Set("hit ratios per tier", "%s (the uniform phases, from the service's /metrics)", m.allTiers)
	for _, t := range tiers {
		if n := m.allTiers.total(); n > 0 {
			rep.Metric(cs, "uniform", 0, "hit_ratio_"+t, m.allTiers[t]/n)
		}
	}
	if rig.cg != nil {
		peak, hits := rig.cg.peak(), rig.cg.limitHits()
		rep.Env.Set("service memory (cgroup)", "peak %s of the %s limit (page cache included); limit reached %d times", humanize.IBytes(uint64(max(peak, 0))), humanize.IBytes(uint64(rig.limit)), hits)
		rep.Metric(cs, "", 0, "cgroup_peak_bytes", float64(peak))
	}
	if rss := childRSS(rig.svc.pid); rss > 0 {
		rep.Env.Set("service RSS at the end", "%s", humanize.IBytes(uint64(rss)))
	}
}

// batched writes the headline: disk reads per disk-served read from the
// batched phases.
func (m *bigdataRuns) batched(b *strings.Builder, rep *Report, avgStored float64) {
	var batchVals, batchBytes, batchDisk []float64
	for _, p := range m.batches {
		if v := batchPerDisk(p[0], p[1]); !math.IsNaN(v) {
			batchVals = append(batchVals, v)
			d := p[1].tiers["disk"] + p[1].tiers["partial"]
			batchDisk = append(batchDisk, d/float64(p[1].stats.Count))
			batchBytes = append(batchBytes, (float64(p[1].io.Rchar)-float64(p[0].io.Rchar)/float64(p[0].stats.Count)*float64(p[1].stats.Count))/d/avgStored)
		}
	}
	if len(batchVals) == 0 {
		return
	}
	fmt.Fprintf(b, "**Disk reads per disk-served read: %.3f** (goal 1.00; file bytes ÷ record size %.3f; median of %d runs of %s). "+
		"Measured with one client whose every request is a batch of %d random addresses (POST %s), against a baseline of batches of hot-set addresses that memory serves: "+
		"the service's read syscalls (/proc/PID/io syscr) less the baseline's per request, over the chunks served from disk. "+
		"The socket reads, which vary by one or two per request with timing, are spread over %.0f disk reads per request, so this is the syscall count to trust. "+
		"It goes through the batch path (GetChunks), which merges only adjacent records; random addresses are almost never adjacent.\n\n",
		median(batchVals), median(batchBytes), len(batchVals), m.batchDur, batchSize, api.ChunksPath(bigdataDB), median(batchDisk))
	rep.Metric(m.cs, "batched", 1, "disk_reads_per_disk_read", median(batchVals))
	rep.Metric(m.cs, "batched", 1, "file_bytes_per_disk_read_over_record", median(batchBytes))
}

// perClients writes the YugabyteDB table, a row per client count, and
// what its columns mean.
func (m *bigdataRuns) perClients(b *strings.Builder, rep *Report, clients []int, avgStored float64) {
	cs := m.cs
	fmt.Fprintf(b, "The YugabyteDB table: for each client count, the uniform reads' throughput and latency, where they were served, and what a read not served from memory cost the service process. Medians over runs.\n\n")
	fmt.Fprintf(b, "| clients | ops/s | avg µs | p99 µs | memory hits | disk hits | disk reads per disk-served read (syscr, single GETs) | file bytes per disk-served read ÷ record size (rchar) | service's count | device bytes per disk-served read (read_bytes) | GCs per 1000 reads |\n")
	fmt.Fprintf(b, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var baseParts []string
	for _, c := range clients {
		u, mr := m.runs[chunkKey{"uniform", c}], m.runs[chunkKey{"memory", c}]
		var perDisk, byteRatio, own, bytesPer, memPct, diskPct, basePer, perReq, gcs []float64
		for i := range u {
			n := float64(max(1, u[i].stats.Count))
			mn := float64(max(1, mr[i].stats.Count))
			base := float64(mr[i].io.Syscr) / mn
			baseBytes := float64(mr[i].io.Rchar) / mn
			d := u[i].tiers["disk"] + u[i].tiers["partial"]
			served := u[i].tiers.total()
			extra := float64(u[i].io.Syscr) - base*n
			basePer = append(basePer, base)
			perReq = append(perReq, extra/n)
			gcs = append(gcs, u[i].gcs/n*1000)
			if d > 0 {
				perDisk = append(perDisk, extra/d)
				byteRatio = append(byteRatio, (float64(u[i].io.Rchar)-baseBytes*n)/d/avgStored)
				own = append(own, u[i].diskReads/d)
				bytesPer = append(bytesPer, float64(u[i].io.ReadBytes)/d)
			}
			if served > 0 {
				memPct = append(memPct, u[i].tiers["memory"]/served*100)
				diskPct = append(diskPct, d/served*100)
			}
		}
		res, _ := rep.find(cs, "uniform", c)
		fmt.Fprintf(b, "| %d | %s | %s | %s | %.1f%% | %.1f%% | %s | %s | %s | %s | %.2f |\n", c, fmtRate(res.Throughput), fmtUS(res.MeanUS), fmtUS(res.P99US),
			median(memPct), median(diskPct), fmtOr(perDisk, "%.2f"), fmtOr(byteRatio, "%.2f"), fmtOr(own, "%.2f"), fmtOr(bytesPer, "%.0f"), median(gcs))
		if len(perDisk) > 0 {
			rep.Metric(cs, "uniform", c, "disk_reads_per_disk_read", median(perDisk))
			rep.Metric(cs, "uniform", c, "file_bytes_per_disk_read_over_record", median(byteRatio))
			rep.Metric(cs, "uniform", c, "service_disk_reads_per_disk_read", median(own))
			rep.Metric(cs, "uniform", c, "device_bytes_per_disk_read", median(bytesPer))
		}
		rep.Metric(cs, "uniform", c, "disk_reads_per_request", median(perReq))
		rep.Metric(cs, "uniform", c, "memory_hit_pct", median(memPct))
		rep.Metric(cs, "uniform", c, "disk_hit_pct", median(diskPct))
		rep.Metric(cs, "uniform", c, "gc_per_1000_reads", median(gcs))
		rep.Metric(cs, "memory", c, "syscr_per_request", median(basePer))
		baseParts = append(baseParts, fmt.Sprintf("%.2f with %s", median(basePer), plural(c, "client")))
	}
	fmt.Fprintf(b, "\n- **disk reads per disk-served read (single GETs)**: the service's read syscalls (syscr) during the uniform reads less the memory baseline's per request (%s read syscalls per request), over the chunks served from disk. "+
		"It overstates: the socket reads per request are not the same on both paths. Go's HTTP server reads the connection in the background while a handler runs, and a memory hit often finishes before that read is issued, "+
		"while a disk hit never does; a read that finds no next request yet (EAGAIN) counts too, and how often that happens also depends on timing. So it can be up to about half a read too many at low concurrency; "+
		"hence the batched figure above.\n", strings.Join(baseParts, ", "))
	fmt.Fprintf(b, "- **file bytes ÷ record size**: the bytes the service's reads returned (rchar) less the baseline's per request (a request's bytes on the socket do not vary), "+
		"over the chunks served from disk, divided by the average record (%.0f bytes): 1.00 means each disk-served chunk read its record and nothing else (no index or bloom filter block).\n", avgStored)
	fmt.Fprintf(b, "- **device bytes** (read_bytes) count the pages the block layer fetched: a record of %.0f bytes touches about %.1f pages of 4 KiB, so about %.0f bytes is one read with no readahead; "+
		"much less means the page cache held part of the data set.\n", avgStored, avgStored/4096+1, (avgStored/4096+1)*4096)
}

// batchPerDisk is disk reads per disk-served read from a batched pair:
// the uniform phase's read syscalls less the memory phase's per request,
// over the chunks served from disk.
func batchPerDisk(m, u bigdataRun) float64 {
	d := u.tiers["disk"] + u.tiers["partial"]
	if d == 0 || m.stats.Count == 0 {
		return math.NaN()
	}
	return (float64(u.io.Syscr) - float64(m.io.Syscr)/float64(m.stats.Count)*float64(u.stats.Count)) / d
}

func fmtOr(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, median(xs))
}

// childRSS returns a process's resident set, from /proc/PID/status.
func childRSS(pid string) int64 {
	raw, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// plural renders "1 client", "32 clients".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// checkSpace checks that dir a has need a bytes free and dir b need b,
// both on one file system if they share one.
func checkSpace(a string, needA int64, b string, needB int64) error {
	fa, fb := freeBytes(a), freeBytes(b)
	if fa < 0 || fb < 0 {
		return nil // unknown: go ahead
	}
	if sameDevice(a, b) {
		if fa < needA+needB {
			return fmt.Errorf("needs about %s free on the file system of %s (the data set and the cache's copy of it), which has %s: use a smaller --data or another --out / --cache-dir",
				humanize.IBytes(uint64(needA+needB)), a, humanize.IBytes(uint64(fa)))
		}
		return nil
	}
	if fa < needA {
		return fmt.Errorf("needs about %s free in %s for the data set, which has %s", humanize.IBytes(uint64(needA)), a, humanize.IBytes(uint64(fa)))
	}
	if fb < needB {
		return fmt.Errorf("needs about %s free in %s for the cache's copy, which has %s", humanize.IBytes(uint64(needB)), b, humanize.IBytes(uint64(fb)))
	}
	return nil
}

// sameDevice reports whether two paths are on one file system.
func sameDevice(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return true
	}
	return deviceOf(sa) == deviceOf(sb)
}

// waitDownloaded polls database db's info until every file is cached.
func waitDownloaded(ctx context.Context, r *Runner, hc *http.Client, svc *child, db string, total int64) error {
	last := time.Now()
	return poll(ctx, 100*time.Millisecond, 10*time.Minute+time.Duration(total/(20<<20))*time.Second, func() (bool, error) {
		info, err := dbInfo(ctx, hc, svc.url, db)
		if err != nil {
			return false, err
		}
		var got int64
		cached := 0
		for _, t := range info.Tables {
			got += t.Downloaded
			if t.State == api.StateCached {
				cached++
			}
		}
		if cached == len(info.Tables) {
			return true, nil
		}
		if time.Since(last) > 5*time.Second {
			r.Logf("%s: downloaded %s of %s (%d/%d files)", db, humanize.IBytes(uint64(got)), humanize.IBytes(uint64(total)), cached, len(info.Tables))
			last = time.Now()
		}
		if exited, err := svc.exited(); exited {
			return false, fmt.Errorf("the service exited while downloading (%v):\n%s", err, svc.tail(20))
		}
		return false, nil
	}, func() error { return errors.New("the downloads did not finish in time") })
}

// serviceBinary returns the chunkd binary to run the service with:
// Config.Binary, or one built with go build into the work dir from the
// module in the current directory (chunkd's source tree).
func serviceBinary(ctx context.Context, r *Runner) (string, string, error) {
	if r.Config.Binary != "" {
		return r.Config.Binary, "the binary given (--binary)", nil
	}
	out := filepath.Join(r.WorkDir, "chunkd")
	r.Logf("building the chunkd binary: go build -o %s github.com/chunkd/chunkd/cmd/chunkd", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/chunkd/chunkd/cmd/chunkd")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build chunkd for the service (run from chunkd's source tree, or name a chunkd binary with --binary): %v\n%s", err, msg)
	}
	return out, "built with go build for this run", nil
}
