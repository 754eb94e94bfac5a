package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dustin/go-humanize"
)

const directAlign = 4096

// runDisk is the smell test of the cache dir's disk, before any chunkd
// figure: random reads of a test file at queue depth 1 and 16, with
// O_DIRECT (the device) and through the page cache, as fio's randread
// with the psync engine measures them.
func runDisk(ctx context.Context, r *Runner) error {
	cfg := r.Config
	rep := r.Report
	fileSize := cfg.FileSize
	if fileSize <= 0 {
		fileSize = pick[int64](cfg.Scale, 16<<20, 256<<20, 4<<30)
	}
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = pick(cfg.Scale, []int{4 << 10}, []int{4 << 10, 16 << 10, 32 << 10}, []int{4 << 10, 16 << 10, 32 << 10})
	}
	qds := cfg.Clients
	if len(qds) == 0 {
		qds = []int{1, 16}
	}
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 50*time.Millisecond, 500*time.Millisecond, 2*time.Second),
		Duration: pick(cfg.Scale, 150*time.Millisecond, 2*time.Second, 10*time.Second),
	})
	for _, bs := range sizes {
		if bs <= 0 || bs%directAlign != 0 || int64(bs) > fileSize {
			return fmt.Errorf("block size %d: must be a positive multiple of %d no larger than the file", bs, directAlign)
		}
	}
	rep.Intro = fmt.Sprintf(`The disk under the cache dir, measured before any chunkd figure (the articles' first lesson: the environment moves results more than code does). `+
		`Random reads of %s blocks at block-aligned offsets of a %s test file of random bytes in the cache dir's file system, `+
		`by 1 thread (queue depth 1) and by 16 threads each with one read in flight (queue depth 16), as fio's randread with the psync engine and numjobs does. `+
		"`direct` opens the file with O_DIRECT (aligned buffers), so every read goes to the device; `buffered` reads through the page cache, "+
		"which is dropped for the file (posix_fadvise DONTNEED) before every buffered run, as fio's invalidate=1 does, and told the reads are random (POSIX_FADV_RANDOM: no readahead), as fio's fadvise_hint does: it starts cold and warms as the run reads the file. "+
		"Latency is completion latency (clat) of one pread; throughput is IOPS.",
		sizeList(sizes), humanize.IBytes(uint64(fileSize)))

	if free := freeBytes(cfg.CacheDir); free >= 0 && free < fileSize+64<<20 {
		return fmt.Errorf("disk: the test file needs %s free in %s, which has %s", humanize.IBytes(uint64(fileSize+64<<20)), cfg.CacheDir, humanize.IBytes(uint64(free)))
	}
	name := filepath.Join(cfg.CacheDir, "chunkd-bench-disk.dat")
	start := time.Now()
	r.Logf("disk: writing a %s test file %s", humanize.IBytes(uint64(fileSize)), name)
	if err := writeTestFile(ctx, name, fileSize); err != nil {
		return err
	}
	if !cfg.Keep {
		defer os.Remove(name)
	}
	rep.Env.Set("test file", "`%s`, %s of random bytes, written and fsynced in %s", name, humanize.IBytes(uint64(fileSize)), time.Since(start).Round(time.Millisecond))
	rep.Env.Set("fsync", "the test file is fsynced once after writing; the reads never write")
	rep.Env.Set("store", "none (this suite reads a local file only)")

	modes := []string{"direct", "buffered"}
	if err := probeDirect(name); err != nil {
		modes = []string{"buffered"}
		rep.Notef("O_DIRECT is refused here (%v), as tmpfs and some overlay file systems do: only buffered reads were measured, and they may never reach a device.", err)
		rep.Env.Set("O_DIRECT", "refused: %v", err)
		rep.Baseline = ""
	} else {
		rep.Env.Set("O_DIRECT", "supported (buffers aligned to %d bytes)", directAlign)
	}
	switch rep.Env.CacheFS {
	case "tmpfs", "ramfs", "overlay", "shm":
		rep.Notef("The cache dir is on %s: its reads, O_DIRECT or not, may never reach a device, so these are not disk figures. Point --cache-dir at the disk the service will use.", rep.Env.CacheFS)
	}

	engine := "built-in: Go pread (os.File.ReadAt), one goroutine per queue slot"
	fio := ""
	if cfg.Fio {
		if p, err := exec.LookPath("fio"); err == nil {
			fio = p
			out, _ := exec.CommandContext(ctx, fio, "--version").Output()
			engine = fmt.Sprintf("%s (%s): --rw=randread --ioengine=psync --numjobs=QD --group_reporting --invalidate=1", p, strings.TrimSpace(string(out)))
			rep.Baseline = "fio-direct"
		} else {
			rep.Notef("--fio was given but fio is not installed (apt-get install fio): the built-in reader was used.")
		}
	}
	rep.Env.Set("engine", "%s", engine)
	rep.Env.Set("timing", "warm-up %s, then %s per case and run", load.Warmup, describeLoad(load))

	d := &diskBench{file: name, size: fileSize, sizes: sizes, qds: qds, modes: modes, fio: fio, load: load}
	runs, colds, err := d.measure(ctx, r)
	if err != nil {
		return err
	}
	d.report(rep, runs, colds)
	return nil
}

// diskBench is what the disk suite measures: random reads of file with
// each block size, queue depth and mode, by the built-in reader or by fio.
type diskBench struct {
	file  string
	size  int64
	sizes []int    // block sizes
	qds   []int    // queue depths
	modes []string // "direct", "buffered"
	fio   string   // fio's path; "" for the built-in reader
	load  Load
}

// diskKey is a case: block size, queue depth and mode.
type diskKey struct {
	bs, qd int
	mode   string
}

// measure runs every case, runs outermost. It returns each case's Stats
// per run and, for the buffered cases of the built-in reader, the share
// of reads (in percent) that were the first of their block in the run.
func (d *diskBench) measure(ctx context.Context, r *Runner) (runs map[diskKey][]Stats, colds map[diskKey][]float64, err error) {
	runs, colds = map[diskKey][]Stats{}, map[diskKey][]float64{}
	for run := 1; run <= r.Config.Runs; run++ {
		for _, bs := range d.sizes {
			for _, qd := range d.qds {
				for _, mode := range d.modes {
					var st Stats
					var s Sample
					var cold float64
					var err error
					if d.fio != "" {
						st, err = runFio(ctx, d.fio, d.file, d.size, bs, qd, mode == "direct", d.load)
					} else {
						s, cold, err = readRandom(ctx, d.file, d.size, bs, qd, mode == "direct", d.load)
						st = s.Stats()
					}
					if err != nil {
						return nil, nil, fmt.Errorf("disk %s %s qd %d: %w", sizeName(bs), mode, qd, err)
					}
					k := diskKey{bs, qd, mode}
					runs[k] = append(runs[k], st)
					if d.fio == "" && mode == "buffered" {
						colds[k] = append(colds[k], cold*100)
					}
					if d.fio == "" && qd == d.qds[0] {
						r.Report.Samples(diskCase(bs), mode, qd, s.Lat)
					}
					r.Logf("disk: run %d/%d %s %s qd %d: p50 %s µs, p99 %s µs, %s IOPS", run, r.Config.Runs, diskCase(bs), mode, qd,
						fmtUS(us(st.P50)), fmtUS(us(st.P99)), fmtRate(st.Throughput))
				}
			}
		}
	}
	return runs, colds, nil
}

// report adds the results and the share of buffered reads that reached
// the device.
func (d *diskBench) report(rep *Report, runs map[diskKey][]Stats, colds map[diskKey][]float64) {
	for _, bs := range d.sizes {
		for _, mode := range d.modes {
			for _, qd := range d.qds {
				path := mode
				if d.fio != "" {
					path = "fio-" + mode
				}
				rep.Add(Summarize("disk", diskCase(bs), path, qd, runs[diskKey{bs, qd, mode}]))
			}
		}
	}
	if len(colds) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "The page cache was dropped for the file before each buffered run and readahead is off, so a buffered read went to the device only if it was the first read of its block in the run (warm-up included). "+
			"Share of the measured buffered reads that were such first reads (median over runs); the rest were page-cache hits. A large share of hits means the run read the whole file into memory: use --file-size larger than what the run reads, or read the direct rows.\n\n")
		fmt.Fprintf(&b, "| block | queue depth | cold reads |\n|---|--:|--:|\n")
		for _, bs := range d.sizes {
			for _, qd := range d.qds {
				if c := colds[diskKey{bs, qd, "buffered"}]; len(c) > 0 {
					fmt.Fprintf(&b, "| %s | %d | %.1f%% |\n", sizeName(bs), qd, median(c))
					rep.Metric(diskCase(bs), "buffered", qd, "cold_read_pct", median(c))
				}
			}
		}
		rep.Section("Buffered reads: how many reached the device", b.String())
	}
	if d.fio == "" {
		rep.Notef("Go's pread on a regular file blocks an OS thread; queue depth 16 is 16 goroutines, each on its own thread while it waits, as fio's numjobs=16 with psync is 16 processes.")
	}
}

func diskCase(bs int) string {
	return "randread-" + sizeName(bs)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func describeLoad(l Load) string {
	if l.Count > 0 {
		return fmt.Sprintf("%d operations", l.Count)
	}
	s := l.Duration.String()
	if l.MinCount > 0 {
		s += fmt.Sprintf(" (and at least %d operations)", l.MinCount)
	}
	return s
}

func sizeList(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		parts[i] = sizeName(s)
	}
	return strings.Join(parts, ", ")
}

func intList(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}

// sizeName names a size exactly: 16KiB, 1MiB, 1000B.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// writeTestFile writes size random bytes to name and fsyncs it (random,
// so that no layer can compress or skip it), reusing a file of that size.
func writeTestFile(ctx context.Context, name string, size int64) error {
	if fi, err := os.Stat(name); err == nil && fi.Size() == size {
		return nil
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'c', 'h', 'u', 'n', 'k', 'd'})
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if ctx.Err() != nil {
			f.Close()
			os.Remove(name)
			return ctx.Err()
		}
		n := min(int64(len(buf)), size-off)
		rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			os.Remove(name)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// alignedBuf returns n bytes starting at a multiple of directAlign.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&b[0])) % directAlign); rem != 0 {
		off = directAlign - rem
	}
	return b[off : off+n : off+n]
}

// probeDirect opens name with O_DIRECT and reads one aligned block.
func probeDirect(name string) error {
	f, err := openDirect(name)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(alignedBuf(directAlign), 0)
	return err
}

// readRandom runs the built-in random reader. It also returns the share
// of the measured reads that were the first read of their block in the
// run: for buffered reads (page cache dropped, no readahead) those are the
// ones that went to the device.
func readRandom(ctx context.Context, name string, size int64, bs, qd int, direct bool, l Load) (Sample, float64, error) {
	var f *os.File
	var err error
	if direct {
		f, err = openDirect(name)
	} else {
		if err := dropCache(name); err != nil {
			return Sample{}, 0, fmt.Errorf("drop the file's pages from the page cache: %w", err)
		}
		if f, err = os.Open(name); err == nil {
			err = adviseRandom(f)
		}
	}
	if err != nil {
		return Sample{}, 0, err
	}
	defer f.Close()
	blocks := size / int64(bs)
	seen := make([]atomic.Uint64, (blocks+63)/64)
	var measuring atomic.Bool
	var firsts atomic.Int64
	l.Mark = func() { measuring.Store(true) }
	bufs := make([][]byte, qd)
	for i := range bufs {
		bufs[i] = alignedBuf(bs)
	}
	l.Clients = qd
	s, err := Drive(ctx, l, func(ctx context.Context, w int, rng *rand.Rand) error {
		b := rng.Int64N(blocks)
		bit := uint64(1) << (b % 64)
		if seen[b/64].Or(bit)&bit == 0 && measuring.Load() {
			firsts.Add(1)
		}
		off := b * int64(bs)
		n, err := f.ReadAt(bufs[w], off)
		if err != nil {
			return err
		}
		if n != bs {
			return fmt.Errorf("short read: %d of %d bytes", n, bs)
		}
		return nil
	})
	if err != nil || len(s.Lat) == 0 {
		return s, 0, err
	}
	return s, float64(firsts.Load()) / float64(len(s.Lat)), nil
}

// fioOutput is the part of fio's JSON output used here.
type fioOutput struct {
	Jobs []struct {
		Read struct {
			TotalIOs int64   `json:"total_ios"`
			IOPS     float64 `json:"iops"`
			Clat     struct {
				Mean       float64            `json:"mean"`
				Percentile map[string]float64 `json:"percentile"`
			} `json:"clat_ns"`
		} `json:"read"`
	} `json:"jobs"`
}

// runFio runs one case with fio (psync engine, numjobs = queue depth,
// reports grouped) and turns its JSON into Stats. fio's percentiles come
// from its own latency histogram.
func runFio(ctx context.Context, fio, name string, size int64, bs, qd int, direct bool, l Load) (Stats, error) {
	d := "0"
	if direct {
		d = "1"
	}
	args := []string{"--name=chunkd-bench", "--filename=" + name, "--size=" + strconv.FormatInt(size, 10),
		"--rw=randread", "--bs=" + strconv.Itoa(bs), "--direct=" + d, "--ioengine=psync",
		"--numjobs=" + strconv.Itoa(qd), "--group_reporting", "--invalidate=1",
		"--percentile_list=50:95:99", "--output-format=json"}
	if l.Count > 0 {
		args = append(args, "--number_ios="+strconv.Itoa(max(1, l.Count/qd)))
	} else {
		args = append(args, "--time_based", "--runtime="+strconv.FormatInt(max(1, l.Duration.Milliseconds()), 10)+"ms")
	}
	if l.Warmup > 0 {
		args = append(args, "--ramp_time="+strconv.FormatInt(l.Warmup.Milliseconds(), 10)+"ms")
	}
	out, err := exec.CommandContext(ctx, fio, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return Stats{}, fmt.Errorf("fio: %v: %s", err, ee.Stderr)
		}
		return Stats{}, err
	}
	// fio may print notes before the JSON.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var fo fioOutput
	if err := json.Unmarshal(out, &fo); err != nil {
		return Stats{}, fmt.Errorf("fio output: %w", err)
	}
	if len(fo.Jobs) == 0 {
		return Stats{}, errors.New("fio output: no jobs")
	}
	rd := fo.Jobs[0].Read
	pct := func(p string) time.Duration { return time.Duration(rd.Clat.Percentile[p]) }
	return Stats{
		Count:      rd.TotalIOs,
		Mean:       time.Duration(rd.Clat.Mean),
		P50:        pct("50.000000"),
		P95:        pct("95.000000"),
		P99:        pct("99.000000"),
		Throughput: rd.IOPS,
	}, nil
}
