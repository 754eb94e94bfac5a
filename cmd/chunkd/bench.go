package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/bench"
	"github.com/dustin/go-humanize"
)

// benchCommand runs a benchmark suite and writes its report.
type benchCommand struct{ cmdBase }

// intsFlag is a comma-separated list of positive integers.
type intsFlag []int

func (f *intsFlag) String() string {
	parts := make([]string, len(*f))
	for i, v := range *f {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (f *intsFlag) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return fmt.Errorf("bad list %q: want positive integers separated by commas", v)
		}
		out = append(out, n)
	}
	*f = out
	return nil
}

// sizesFlag is a comma-separated list of byte sizes (4KiB,16KiB).
type sizesFlag []int

func (f *sizesFlag) String() string {
	parts := make([]string, len(*f))
	for i, v := range *f {
		parts[i] = humanize.IBytes(uint64(v))
	}
	return strings.Join(parts, ",")
}

func (f *sizesFlag) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := humanize.ParseBytes(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 1<<30 {
			return fmt.Errorf("bad size list %q: want sizes such as 4KiB,16KiB", v)
		}
		out = append(out, int(n))
	}
	*f = out
	return nil
}

func (c *benchCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("bench", "bench SUITE --out DIR [flags]", c.stderr)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(c.stderr, "\nSuites:")
		for _, s := range bench.Suites() {
			fmt.Fprintf(c.stderr, "  %-8s %s\n", s.Name(), s.Synopsis())
		}
		fmt.Fprintln(c.stderr, "\nWrites DIR/report.md, DIR/results.csv, DIR/metrics.csv, DIR/environment.json and PNG plots.")
	}
	out := fs.String("out", "", "directory for the report (required)")
	scale := fs.String("scale", "small", "small (a few minutes on 2 cores) or large (real figures)")
	runs := fs.Int("runs", 3, "runs per case; every figure is the median over them")
	duration := fs.Duration("duration", 0, "measured time per case and run (default: by scale)")
	warmup := fs.Duration("warmup", 0, "warm-up per case and run (default: by scale)")
	count := fs.Int("count", 0, "measure a fixed number of operations per case and run instead of a duration")
	var clients intsFlag
	fs.Var(&clients, "clients", "concurrent clients (queue depths for disk), e.g. 1,4,16 (default: by scale)")
	var sizes sizesFlag
	fs.Var(&sizes, "sizes", "chunk sizes (block sizes for disk), e.g. 4KiB,16KiB (default: by scale)")
	cacheDir := fs.String("cache-dir", "", "the service's cache dir; disk's test file goes there (default: DIR/cache)")
	rtt := fs.Duration("rtt", 30*time.Millisecond, "emulated round trip of the store for the paths that read it (miss, store-direct, cold service)")
	apiName := fs.String("api", "http", "chunks: the service's API to measure: http, grpc or both")
	fsync := fs.Bool("fsync", true, "the service fsyncs downloaded files")
	storeDirect := fs.Bool("store-direct", false, "sysbench, title5: also measure a client reading the store directly (slow: one emulated round trip per page)")
	keep := fs.Bool("keep", false, "keep the data sets, test files and cache dirs (a later run reuses a matching data set)")
	var fileSize, data, mem, cgroupMem, bandwidth sizeFlag
	fs.Var(&bandwidth, "bandwidth", "cap the emulated store's throughput at SIZE per second, e.g. 100MB (default: no cap)")
	fs.Var(&fileSize, "file-size", "disk: size of the test file (default: 256MiB small, 4GiB large)")
	fio := fs.Bool("fio", false, "disk: measure with fio, if installed, instead of the built-in reader")
	fs.Var(&data, "data", "bigdata: table-file bytes in the data set (default: 512MiB small, 8GiB large)")
	fs.Var(&mem, "mem", "the service's --mem (bigdata default: 64MiB small, 1GiB large; elsewhere the service's own 256MiB)")
	fs.Var(&cgroupMem, "cgroup-mem", "bigdata: the service's cgroup memory limit (default: 2 × mem + 64MiB)")
	noCgroup := fs.Bool("no-cgroup", false, "bigdata: do not put the service under a cgroup memory limit")
	binary := fs.String("binary", "", "the chunkd binary to run the service with (default: this one)")
	paths := fs.String("paths", "", "sysbench, title5: measure only these paths beside the local file, e.g. service-same-host (default: all)")

	// The suite may come first (chunkd bench chunks --out DIR) or last.
	var suite string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		suite, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if suite == "" && len(rest) > 0 {
		suite, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	if suite == "" {
		return usagef("name a suite: %s", suiteNames())
	}
	if _, ok := bench.Lookup(suite); !ok {
		return usagef("no suite %q: have %s", suite, suiteNames())
	}
	if *out == "" {
		return usagef("--out is required")
	}
	sc, err := bench.ParseScale(*scale)
	if err != nil {
		return usagef("%v", err)
	}
	if *runs < 1 {
		return usagef("--runs must be at least 1")
	}
	if *count < 0 || *duration < 0 || *warmup < 0 {
		return usagef("--count, --duration and --warmup cannot be negative")
	}
	switch *apiName {
	case "http", "grpc", "both":
	default:
		return usagef("--api must be http, grpc or both, not %q", *apiName)
	}
	if *binary == "" {
		if exe, err := os.Executable(); err == nil {
			*binary = exe
		}
	} else if abs, err := filepath.Abs(*binary); err == nil {
		*binary = abs
	}
	var onlyPaths []string
	if *paths != "" {
		onlyPaths = strings.Split(*paths, ",")
	}
	cfg := bench.Config{
		Out: *out, Scale: sc, Runs: *runs,
		Warmup: *warmup, Duration: *duration, Count: *count,
		Clients: clients, Sizes: sizes,
		CacheDir: *cacheDir, RTT: *rtt, Bandwidth: int64(bandwidth), API: *apiName, Fsync: *fsync, Keep: *keep,
		StoreDirect: *storeDirect, Paths: onlyPaths,
		FileSize: int64(fileSize), Fio: *fio,
		DataBytes: int64(data), MemBytes: int64(mem), CgroupMem: int64(cgroupMem), NoCgroup: *noCgroup,
		Binary: *binary, Log: c.stderr,
	}
	rep, err := bench.Run(ctx, suite, cfg)
	if rep != nil {
		fmt.Fprintln(c.stdout, filepath.Join(cfg.Out, "report.md"))
	}
	return err
}

func suiteNames() string {
	var names []string
	for _, s := range bench.Suites() {
		names = append(names, s.Name())
	}
	return strings.Join(names, ", ")
}
