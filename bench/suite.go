package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Suite is one benchmark: it measures, and adds what it measured to the
// Runner's Report. Run writes its scratch files under r.WorkDir and
// removes what it made unless r.Config.Keep is set; the report files
// (report.md, results.csv, metrics.csv, environment.json, plots) are
// written by the package after Run returns.
type Suite interface {
	// Name is the suite's command-line name: lower case, no spaces.
	Name() string
	// Synopsis is one line for "chunkd-bench -h".
	Synopsis() string
	// Run measures at r.Config's scale.
	Run(ctx context.Context, r *Runner) error
}

// suite is a Suite made of its parts, as the package's suites are listed
// in init below.
type suite struct {
	name, synopsis string
	// The report's labels: the path its multipliers are against (none if
	// ""), the threads column ("clients" if "") and the throughput's unit
	// ("ops/s" if "").
	baseline, threads, unit string
	run                     func(ctx context.Context, r *Runner) error
}

func (s suite) Name() string     { return s.name }
func (s suite) Synopsis() string { return s.synopsis }

func (s suite) Run(ctx context.Context, r *Runner) error {
	r.Report.Baseline = s.baseline
	if s.threads != "" {
		r.Report.ThreadsLabel = s.threads
	}
	if s.unit != "" {
		r.Report.ThroughputUnit = s.unit
	}
	return s.run(ctx, r)
}

// The package's suites.
func init() {
	for _, s := range []suite{
		{name: "disk", run: runDisk, baseline: "direct", threads: "queue depth", unit: "IOPS", synopsis: "fio-style random reads (4/16/32 KiB, queue depth 1 and 16, O_DIRECT and buffered) in the cache dir's file system"},
		{name: "chunks", run: runChunks, baseline: "bare-http", synopsis: "GetChunk latency and throughput per path: bare HTTP, memory hit, disk hit, read-through miss, store direct"},
		{name: "bigdata", run: runBigdata, baseline: "memory", synopsis: "uniform random reads of a data set several times the service's memory: ops/s, latency, disk reads per read (goal 1.00)"},
		{name: "sql", run: runSQL, baseline: pathLocal, synopsis: "the seed's SQL queries (join, point lookups, aggregate): local file vs store directly vs service cold and warm"},
		{name: "sysbench", run: runSysbench, baseline: pathLocal, threads: "threads", synopsis: "Dolt's sysbench read tests on SQLite: median latency per test, local file vs warm service, reads_mean_multiplier"},
		{name: "clone", run: runClone, baseline: pathStoreDirect, threads: "clients", unit: "MB/s", synopsis: "Dolt clones through the service (the requests dolt clone makes, replayed) against from the store: cold and warm clone times, store bytes per clone"},
		{name: "cluster", run: runCluster, threads: "clients", synopsis: "3 chunkd serve processes as one cache (--peers) beside one alone: store bytes per file byte in a cold storm of 16 clients, warm p50/p99 routed, through a node and alone, extra hops per read, failed reads when one node is killed"},
		{name: "api", run: runAPI, baseline: pathLocal, synopsis: "the query API (chunkd serve's SQL over HTTP): the seed's three queries, a small cached result and title5 through it, result cache off and on, against the local file in the same run"},
		{name: "title5", run: runTitle5, baseline: pathLocal, threads: "threads", unit: "tps", synopsis: "the 5-SELECT IMDb title transaction against threads: tps, avg and p95 latency, local file vs warm service, hit ratios per tier"},
	} {
		Register(s)
	}
}

var (
	regMu  sync.Mutex
	suites = map[string]Suite{}
)

// Register makes a suite available to Run and Lookup under its name. It
// panics if the name is taken. Suites register from init functions.
func Register(s Suite) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := suites[s.Name()]; dup {
		panic("bench: Register called twice for suite " + s.Name())
	}
	suites[s.Name()] = s
}

// Lookup returns the suite registered under name.
func Lookup(name string) (Suite, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	s, ok := suites[name]
	return s, ok
}

// Suites returns every registered suite, sorted by name.
func Suites() []Suite {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Suite, 0, len(suites))
	for _, s := range suites {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Scale picks a suite's default sizes, counts and durations.
type Scale string

const (
	// Small finishes in a few minutes on 2 cores; CI's smoke run uses it.
	Small Scale = "small"
	// Large is for real figures: bigger data sets, more clients, longer runs.
	Large Scale = "large"
	// scaleTiny is the package tests' scale: seconds per suite.
	scaleTiny Scale = "tiny"
)

// ParseScale parses "small" or "large".
func ParseScale(s string) (Scale, error) {
	switch Scale(s) {
	case Small, Large:
		return Scale(s), nil
	}
	return "", fmt.Errorf("bad scale %q: want small or large", s)
}

// pick returns the value for scale sc.
func pick[T any](sc Scale, tiny, small, large T) T {
	switch sc {
	case scaleTiny:
		return tiny
	case Large:
		return large
	}
	return small
}

// Config is one invocation of a suite. Zero fields take the scale's
// defaults; suites ignore the fields that do not concern them.
type Config struct {
	Out   string // report directory (required)
	Scale Scale  // default Small
	Runs  int    // runs per case; each figure is the median over them (default 3)

	Warmup   time.Duration // per case and run, before measuring
	Duration time.Duration // measured time per case and run
	Count    int           // if > 0, a fixed number of operations per case and run instead of Duration
	Clients  []int         // concurrent clients (or queue depths for disk)
	Sizes    []int         // chunk sizes (chunks) or block sizes (disk), in bytes

	CacheDir string        // the service's cache dir; disk's test file lives there (default Out/cache)
	RTT      time.Duration // emulated store round trip (default 30ms)
	// Bandwidth caps the emulated store's throughput, in bytes per second,
	// for the paths that read it (0: no cap).
	Bandwidth int64
	API       string // chunks: "http" (default), "grpc" or "both"
	Fsync     bool   // the service fsyncs downloads
	Keep      bool   // keep data sets and cache dirs after the run

	// StoreDirect adds the store-direct path to sysbench and title5: a
	// client reading the store itself, with the emulated round trip, and no
	// service. (The sql suite always measures it.)
	StoreDirect bool
	// Paths, when set, limits sysbench and title5 to these paths (the
	// local file, the baseline, is always measured).
	Paths []string

	FileSize  int64  // disk: size of the test file
	Fio       bool   // disk: run fio instead of the built-in reader, if it is installed
	DataBytes int64  // bigdata: table-file bytes in the data set
	MemBytes  int64  // bigdata: the service's --mem
	CgroupMem int64  // bigdata: the service's cgroup memory limit (default 2×MemBytes + 64 MiB)
	NoCgroup  bool   // bigdata: do not try a cgroup memory limit
	Binary    string // bigdata: the chunkd binary for the service (default: built with go build)

	// CommandLine is recorded in the environment block (default os.Args).
	CommandLine []string
	// Log gets progress lines (default io.Discard).
	Log io.Writer
}

// rtt is the emulated store's round trip: RTT, or 30 ms.
func (c Config) rtt() time.Duration {
	if c.RTT > 0 {
		return c.RTT
	}
	return 30 * time.Millisecond
}

// clients is Clients, or the scale's default.
func (c Config) clients(tiny, small, large []int) []int {
	if len(c.Clients) > 0 {
		return c.Clients
	}
	return pick(c.Scale, tiny, small, large)
}

// load is def, a suite's Load at its scale, with Config's warm-up,
// duration and count where they are set.
func (c Config) load(def Load) Load {
	def.Warmup = durationOr(c.Warmup, def.Warmup)
	def.Duration = durationOr(c.Duration, def.Duration)
	if c.Count > 0 {
		def.Count = c.Count
	}
	return def
}

// Runner is what a suite runs with: its configuration, its report, and a
// scratch directory.
type Runner struct {
	Config  Config
	Report  *Report
	WorkDir string // scratch space under Config.Out, removed afterwards unless Config.Keep
	log     io.Writer
	logMu   sync.Mutex
}

// Logf prints a progress line.
func (r *Runner) Logf(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.log, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Run runs the named suite and writes its report to cfg.Out.
func Run(ctx context.Context, name string, cfg Config) (*Report, error) {
	s, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("no suite %q (have: %s)", name, suiteNames())
	}
	return run(ctx, s, cfg)
}

// run runs suite s (Run's work once the name is looked up).
func run(ctx context.Context, s Suite, cfg Config) (*Report, error) {
	name := s.Name()
	if cfg.Out == "" {
		return nil, errors.New("no output directory")
	}
	if cfg.Scale == "" {
		cfg.Scale = Small
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if err := checkPaths(name, cfg); err != nil {
		return nil, err
	}
	if cfg.CommandLine == nil {
		cfg.CommandLine = os.Args
	}
	out, err := filepath.Abs(cfg.Out)
	if err != nil {
		return nil, err
	}
	cfg.Out = out
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.Out, "cache")
	}
	if cfg.CacheDir, err = filepath.Abs(cfg.CacheDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, err
	}
	r := &Runner{
		Config:  cfg,
		Report:  newReport(s.Name(), cfg),
		WorkDir: filepath.Join(cfg.Out, "work-"+s.Name()),
		log:     cfg.Log,
	}
	if err := os.MkdirAll(r.WorkDir, 0o755); err != nil {
		return nil, err
	}
	r.Report.Env = collectEnvironment(ctx, s.Name(), cfg)
	r.Logf("%s: scale %s, %d runs, report in %s", s.Name(), cfg.Scale, cfg.Runs, cfg.Out)
	if w := r.Report.Env.loadWarning(); w != "" {
		r.Logf("warning: %s", w)
	}
	start := time.Now()
	runErr := s.Run(ctx, r)
	r.Report.Env.finish(time.Since(start))
	if !cfg.Keep {
		os.RemoveAll(r.WorkDir)
		if filepath.Dir(cfg.CacheDir) == cfg.Out {
			os.Remove(cfg.CacheDir) // only if empty: a user's cache dir is left alone
		}
	}
	if runErr != nil {
		r.Report.Notef("The run failed: %v. The figures above are the cases that finished.", runErr)
	}
	if err := r.Report.write(cfg.Out); err != nil {
		return r.Report, errors.Join(runErr, err)
	}
	r.Logf("%s: wrote %s", s.Name(), filepath.Join(cfg.Out, "report.md"))
	return r.Report, runErr
}

func suiteNames() string {
	var s string
	for i, x := range Suites() {
		if i > 0 {
			s += ", "
		}
		s += x.Name()
	}
	return s
}
