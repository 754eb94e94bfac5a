package main

import (
	"flag"
	"path/filepath"
	"strings"
	"time"

	"github.com/chunkd/chunkd/bench"
)

// options are chunkd-bench's flags: AddFlags declares them, Validate
// checks them, config turns them into a bench.Config.
type options struct {
	suite string

	out, scale, cacheDir, api, binary, paths  string
	runs, count                               int
	duration, warmup, rtt                     time.Duration
	clients                                   intsFlag
	sizes                                     sizesFlag
	fsync, storeDirect, keep, fio, noCgroup   bool
	fileSize, data, mem, cgroupMem, bandwidth sizeFlag
}

// AddFlags declares every flag on fs.
func (o *options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "out", "", "directory for the report (required)")
	fs.StringVar(&o.scale, "scale", "small", "small (a few minutes on 2 cores) or large (real figures)")
	fs.IntVar(&o.runs, "runs", 3, "runs per case; every figure is the median over them")
	fs.DurationVar(&o.duration, "duration", 0, "measured time per case and run (default: by scale)")
	fs.DurationVar(&o.warmup, "warmup", 0, "warm-up per case and run (default: by scale)")
	fs.IntVar(&o.count, "count", 0, "measure a fixed number of operations per case and run instead of a duration")
	fs.Var(&o.clients, "clients", "concurrent clients (queue depths for disk), e.g. 1,4,16 (default: by scale)")
	fs.Var(&o.sizes, "sizes", "chunk sizes (block sizes for disk), e.g. 4KiB,16KiB (default: by scale)")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "the service's cache dir; disk's test file goes there (default: DIR/cache)")
	fs.DurationVar(&o.rtt, "rtt", 30*time.Millisecond, "emulated round trip of the store for the paths that read it (miss, store-direct, cold service)")
	fs.StringVar(&o.api, "api", "http", "chunks: the service's API to measure: http, grpc or both")
	fs.BoolVar(&o.fsync, "fsync", true, "the service fsyncs downloaded files")
	fs.BoolVar(&o.storeDirect, "store-direct", false, "sysbench, title5: also measure a client reading the store directly (slow: one emulated round trip per page)")
	fs.BoolVar(&o.keep, "keep", false, "keep the data sets, test files and cache dirs (a later run reuses a matching data set)")
	fs.Var(&o.bandwidth, "bandwidth", "cap the emulated store's throughput at SIZE per second, e.g. 100MB (default: no cap)")
	fs.Var(&o.fileSize, "file-size", "disk: size of the test file (default: 256MiB small, 4GiB large)")
	fs.BoolVar(&o.fio, "fio", false, "disk: measure with fio, if installed, instead of the built-in reader")
	fs.Var(&o.data, "data", "bigdata: table-file bytes in the data set (default: 512MiB small, 8GiB large)")
	fs.Var(&o.mem, "mem", "the service's --mem (bigdata default: 64MiB small, 1GiB large; elsewhere the service's own 256MiB)")
	fs.Var(&o.cgroupMem, "cgroup-mem", "bigdata: the service's cgroup memory limit (default: 2 × mem + 64MiB)")
	fs.BoolVar(&o.noCgroup, "no-cgroup", false, "bigdata: do not put the service under a cgroup memory limit")
	fs.StringVar(&o.binary, "binary", "", "the chunkd binary to run the service with (default: go build ./cmd/chunkd of the module in the current directory)")
	fs.StringVar(&o.paths, "paths", "", "sysbench, title5: measure only these paths beside the local file, e.g. service-same-host (default: all)")
}

// Validate checks the suite's name and the flags that bench.Run would
// otherwise reject late or not at all.
func (o *options) Validate() error {
	if o.suite == "" {
		return usagef("name a suite: %s", suiteNames())
	}
	if _, ok := bench.Lookup(o.suite); !ok {
		return usagef("no suite %q: have %s", o.suite, suiteNames())
	}
	if o.out == "" {
		return usagef("--out is required")
	}
	if _, err := bench.ParseScale(o.scale); err != nil {
		return usagef("%v", err)
	}
	if o.runs < 1 {
		return usagef("--runs must be at least 1")
	}
	if o.count < 0 || o.duration < 0 || o.warmup < 0 {
		return usagef("--count, --duration and --warmup cannot be negative")
	}
	switch o.api {
	case "http", "grpc", "both":
	default:
		return usagef("--api must be http, grpc or both, not %q", o.api)
	}
	return nil
}

// config is the bench.Config the options ask for (after Validate).
func (o *options) config() bench.Config {
	sc, _ := bench.ParseScale(o.scale)
	binary := o.binary
	if binary != "" {
		if abs, err := filepath.Abs(binary); err == nil {
			binary = abs
		}
	}
	var paths []string
	if o.paths != "" {
		paths = strings.Split(o.paths, ",")
	}
	return bench.Config{
		Out: o.out, Scale: sc, Runs: o.runs,
		Warmup: o.warmup, Duration: o.duration, Count: o.count,
		Clients: o.clients, Sizes: o.sizes,
		CacheDir: o.cacheDir, RTT: o.rtt, Bandwidth: int64(o.bandwidth), API: o.api, Fsync: o.fsync, Keep: o.keep,
		StoreDirect: o.storeDirect, Paths: paths,
		FileSize: int64(o.fileSize), Fio: o.fio,
		DataBytes: int64(o.data), MemBytes: int64(o.mem), CgroupMem: int64(o.cgroupMem), NoCgroup: o.noCgroup,
		Binary: binary,
	}
}

func suiteNames() string {
	var names []string
	for _, s := range bench.Suites() {
		names = append(names, s.Name())
	}
	return strings.Join(names, ", ")
}
