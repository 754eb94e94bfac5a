package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSuites runs every suite at the tests' tiny scale and checks the
// report files are there and well formed. It makes no timing assertions.
func TestSuites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark suite")
	}
	// The suites that run "chunkd serve" children share one build of it.
	binary := filepath.Join(t.TempDir(), "chunkd")
	if msg, err := exec.Command("go", "build", "-o", binary, "github.com/chunkd/chunkd/cmd/chunkd").CombinedOutput(); err != nil {
		t.Fatalf("go build chunkd: %v\n%s", err, msg)
	}
	for _, s := range Suites() {
		t.Run(s.Name(), func(t *testing.T) {
			out := t.TempDir()
			var log strings.Builder
			cfg := Config{Out: out, Scale: scaleTiny, Runs: 2, RTT: 2 * time.Millisecond, Bandwidth: 1 << 30, Binary: binary, Log: &logWriter{t},
				StoreDirect: true} // cover the optional path of sysbench and title5 too
			start := time.Now()
			rep, err := Run(context.Background(), s.Name(), cfg)
			if err != nil {
				t.Fatalf("%s: %v\n%s", s.Name(), err, log.String())
			}
			t.Logf("%s took %s", s.Name(), time.Since(start).Round(time.Millisecond))
			checkReport(t, out, rep)
			checkSuiteReport(t, out, rep)
		})
	}
}

// suiteReportWants are strings a suite's report.md must hold besides the
// common ones: its own tables and paths.
var suiteReportWants = map[string][]string{
	"sql": {"hit ratios per tier", "The seed's table", "| cache service, warm |", "| cache service, warm, same host |", "| object store directly |", "### point-lookup-each",
		"Where the pages came from", "hit_ratio", "| sequential round trips |", "sequential_round_trips", "## The cold path", "first_row_us", "appendix_on_disk_us"},
	"sysbench": {"hit ratios per tier", "reads_mean_multiplier", "| oltp_point_select |", "| index_join_scan |", "| types_table_scan |",
		"Where the pages came from", "| service requests per op |", "`store-direct`", "hit_ratio", "service_requests_per_op"},
	"bigdata":   {"store bytes per byte served", "Disk reads per read"},
	"clone":     {"Store reads per clone", "| service-warm | 1 | 0 B | 0.00 |", "`store-direct`", "store_bytes_per_clone", "## The cold path", "first_byte_ms", "files_on_disk_ms"},
	"chunks":    {"chunkd vs nginx proxy_cache", "| serve-memory |", "Disk reads per disk-served chunk"},
	"lifecycle": {"Store bytes per import", "| unchanged file | 0 B |", "## gc", "Publish lag and the writer beside it", "p99_over_alone"},
	"cluster":   {"Cold storm", "| kill -9 of one node, routing clients |", "the files' bytes", "extra hops per read", "in flight at the kill"},
	"api":       {"The seed's queries", "| api-cached |", "A small result", "title5", "## Goals", "result_cache_hit_ratio", "service_cpu_us_per_tx"},
	"title5":    {"hit ratios per tier", "| threads |", "tps", "Where the pages came from", "| service requests per op |", "`store-direct`", "hit_ratio", "service_requests_per_op"},
}

// checkSuiteReport checks a suite's own parts of its report: every path
// measured in every case, and its own tables (metrics.csv for the names
// ending in a metric).
func checkSuiteReport(t *testing.T, out string, rep *Report) {
	t.Helper()
	wants, ok := suiteReportWants[rep.Suite]
	if !ok {
		return
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	metrics, _ := os.ReadFile(filepath.Join(out, "metrics.csv"))
	for _, w := range wants {
		in := md
		if strings.HasSuffix(w, "_us") || strings.HasSuffix(w, "_ms") || w == "hit_ratio" || w == "store_bytes_per_clone" || w == "service_requests_per_op" || w == "sequential_round_trips" || w == "p99_over_alone" || w == "result_cache_hit_ratio" || w == "service_cpu_us_per_tx" {
			in = metrics
		}
		if !strings.Contains(string(in), w) {
			t.Errorf("%s report lacks %q:\n%s", rep.Suite, w, md)
		}
	}
	for _, cs := range rep.cases() {
		if got, want := len(rep.paths(cs)), len(rep.paths(rep.cases()[0])); got != want {
			t.Errorf("%s case %s has %d paths, the first case %d", rep.Suite, cs, got, want)
		}
	}
}

type logWriter struct{ t *testing.T }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func checkReport(t *testing.T, out string, rep *Report) {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"# chunkd-bench " + rep.Suite, "## Environment", "## Results", "| p50 |", "kernel", "cache dir"}
	if rep.Suite != "disk" && rep.Suite != "bigdata" && rep.Suite != "lifecycle" { // the suites that read an emulated store
		wants = append(wants, "bandwidth cap of 1.0 GiB/s")
	}
	for _, want := range wants {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}

	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("results.csv: %v", err)
	}
	if len(rows) < 2 {
		t.Fatalf("results.csv has %d rows, want a header and at least one result", len(rows))
	}
	if !slices.Equal(rows[0], CSVHeader) {
		t.Errorf("results.csv header = %v, want %v", rows[0], CSVHeader)
	}
	if !slices.Equal(rows[0][:10], strings.Split("suite,case,path,threads,count,mean_us,p50_us,p95_us,p99_us,throughput", ",")) {
		t.Errorf("results.csv's first columns = %v", rows[0][:10])
	}
	for _, row := range rows[1:] {
		if len(row) != len(CSVHeader) {
			t.Fatalf("row %v has %d fields", row, len(row))
		}
		if row[0] != rep.Suite || row[1] == "" || row[2] == "" {
			t.Errorf("row %v: bad suite, case or path", row)
		}
		for i := 3; i < len(row); i++ {
			v, err := strconv.ParseFloat(row[i], 64)
			if err != nil || v < 0 {
				t.Errorf("row %v: field %s = %q is not a non-negative number", row, CSVHeader[i], row[i])
			}
		}
		if row[4] == "0" {
			t.Errorf("row %v: no operations counted", row)
		}
	}

	raw, err := os.ReadFile(filepath.Join(out, "environment.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env Environment
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("environment.json: %v", err)
	}
	if env.Cores < 1 || env.GoVersion == "" || env.Date == "" || env.CommandLine == "" || env.Kernel == "" || env.CacheFS == "" || len(env.Params) == 0 {
		t.Errorf("environment.json is missing facts: %s", raw)
	}
	if env.Suite != rep.Suite {
		t.Errorf("environment.json names suite %q, want %q", env.Suite, rep.Suite)
	}
	if _, err := time.Parse(time.RFC3339, env.Date); err != nil {
		t.Errorf("environment date: %v", err)
	}

	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	if len(pngs) == 0 {
		t.Errorf("no plots in %s", out)
	}
	for _, p := range pngs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is %v", p, b)
		}
		if !strings.Contains(string(md), filepath.Base(p)) {
			t.Errorf("report.md does not show %s", filepath.Base(p))
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(out, "work-"+rep.Suite)); len(ents) > 0 {
		t.Errorf("scratch files left behind: %v", ents)
	}
}

func TestSummarize(t *testing.T) {
	runs := []Stats{
		{Count: 10, Mean: 10 * time.Microsecond, P50: 100 * time.Microsecond, P95: 1, P99: 1, Throughput: 5},
		{Count: 30, Mean: 30 * time.Microsecond, P50: 120 * time.Microsecond, P95: 1, P99: 1, Throughput: 1},
		{Count: 20, Mean: 20 * time.Microsecond, P50: 80 * time.Microsecond, P95: 1, P99: 1, Throughput: 3},
	}
	r := Summarize("s", "c", "p", 4, runs)
	if r.Count != 20 || r.MeanUS != 20 || r.P50US != 100 || r.Throughput != 3 || r.Runs != 3 {
		t.Errorf("medians: %+v", r)
	}
	if r.SpreadPct != 40 { // (120-80)/100
		t.Errorf("spread = %v, want 40", r.SpreadPct)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {0, 1}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
}

func TestParseScale(t *testing.T) {
	for _, s := range []string{"small", "large"} {
		if _, err := ParseScale(s); err != nil {
			t.Error(err)
		}
	}
	for _, s := range []string{"tiny", "", "huge"} {
		if _, err := ParseScale(s); err == nil {
			t.Errorf("ParseScale(%q) accepted", s)
		}
	}
}

func TestRegistry(t *testing.T) {
	var names []string
	for _, s := range Suites() {
		names = append(names, s.Name())
	}
	for _, want := range []string{"api", "bigdata", "chunks", "disk", "sql", "sysbench", "title5"} {
		if !slices.Contains(names, want) {
			t.Errorf("suite %s not registered: %v", want, names)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	Register(suite{name: "disk"})
}

func TestProcIO(t *testing.T) {
	a, err := readProcIO("self")
	if err != nil {
		t.Skip(err)
	}
	os.ReadFile("/proc/self/io")
	b, err := readProcIO("self")
	if err != nil {
		t.Fatal(err)
	}
	if b.Syscr <= a.Syscr {
		t.Errorf("syscr did not grow: %d then %d", a.Syscr, b.Syscr)
	}
}

func TestCheckPaths(t *testing.T) {
	for _, tc := range []struct {
		suite string
		cfg   Config
		err   string
	}{
		{"title5", Config{}, ""},
		{"title5", Config{Paths: []string{pathSameHost}}, ""},
		{"sysbench", Config{Paths: []string{pathService, pathServiceMem}}, ""},
		{"title5", Config{Paths: []string{"nope"}}, `no path "nope"`},
		{"sql", Config{Paths: []string{pathService}}, "only sysbench and title5"},
		{"title5", Config{Paths: []string{pathStoreDirect}}, "only with --store-direct"},
		{"title5", Config{Paths: []string{pathStoreDirect}, StoreDirect: true}, ""},
	} {
		err := checkPaths(tc.suite, tc.cfg)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %v: got %v, want %q", tc.suite, tc.cfg.Paths, err, tc.err)
		}
	}
	all := []*sqlPathDB{{name: pathLocal}, {name: pathService}, {name: pathServiceMem}, {name: pathSameHost}}
	var got []string
	for _, p := range onlyPaths(all, []string{pathSameHost, pathService}) {
		got = append(got, p.name)
	}
	if want := []string{pathLocal, pathService, pathSameHost}; !slices.Equal(got, want) {
		t.Errorf("onlyPaths: %v, want %v", got, want)
	}
}

// twoRuns is a case measured twice at different speeds: a fast run of
// 300 operations of 100 µs and a slow one of 100 of 1 ms, as a closed
// loop on a noisy machine gives. The pooled p50 is the fast run's (100
// µs); the median of the runs' p50s is their mean (550 µs).
func twoRuns() (fast, slow Sample) {
	for range 300 {
		fast.Lat = append(fast.Lat, 100*time.Microsecond)
	}
	for range 100 {
		slow.Lat = append(slow.Lat, time.Millisecond)
	}
	fast.Elapsed, slow.Elapsed = 30*time.Millisecond, 100*time.Millisecond
	return fast, slow
}

// fakeSuite measures nothing: it records twoRuns as one case, so that a
// test can run the whole report path in milliseconds.
var fakeSuite = suite{name: "fake", run: func(ctx context.Context, r *Runner) error {
	fast, slow := twoRuns()
	r.Report.Add(Summarize("fake", "case", "path", 1, []Stats{fast.Stats(), slow.Stats()}))
	r.Report.Samples("case", "path", 1, fast.Lat)
	r.Report.Samples("case", "path", 1, slow.Lat)
	return nil
}}

// TestReportEnvironmentNamesSuite: environment.json says which suite it
// describes (it said "suite": "").
func TestReportEnvironmentNamesSuite(t *testing.T) {
	out := t.TempDir()
	rep, err := run(context.Background(), fakeSuite, Config{Out: out, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "environment.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env Environment
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	if env.Suite != "fake" {
		t.Errorf("environment.json: suite %q, want %q:\n%s", env.Suite, "fake", raw)
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(md), "median of the runs' p50s") || !strings.Contains(string(md), "hist-case.png") {
		t.Errorf("report.md does not show the histogram with what its p50 is:\n%s", md)
	}
	if rep.Results[0].P50US != 550 {
		t.Errorf("the table's p50 = %v µs, want the median of the runs' p50s, 550", rep.Results[0].P50US)
	}
}

// TestHistogramTitleSaysPooled: the histogram's title gives the pooled
// operations' p50, which differs from the table's median of runs, so it
// must say it is pooled (it gave "p50 100 µs" beside a table's 550).
func TestHistogramTitleSaysPooled(t *testing.T) {
	rep := newReport("fake", Config{})
	fast, slow := twoRuns()
	rep.Add(Summarize("fake", "case", "path", 1, []Stats{fast.Stats(), slow.Stats()}))
	rep.Samples("case", "path", 1, fast.Lat)
	rep.Samples("case", "path", 1, slow.Lat)
	title := rep.histTitle(sampleKey{"case", "path", 1})
	for _, want := range []string{"path, 1 client;", "400 ops of 2 runs pooled: p50 100.0 µs, p99 1000 µs"} {
		if !strings.Contains(title, want) {
			t.Errorf("histogram title %q lacks %q", title, want)
		}
	}
	// One run: nothing is pooled, and its p50 is the table's.
	one := newReport("fake", Config{})
	one.Add(Summarize("fake", "case", "path", 4, []Stats{fast.Stats()}))
	one.Samples("case", "path", 4, fast.Lat)
	if title := one.histTitle(sampleKey{"case", "path", 4}); !strings.Contains(title, "path, 4 clients; 300 ops: p50 100.0 µs") {
		t.Errorf("one run's histogram title: %q", title)
	}
}

// TestLoadWarning: a report whose run started with the 1-minute load
// average above the core count says so; one that did not, does not.
func TestLoadWarning(t *testing.T) {
	for _, tc := range []struct {
		load  string
		cores int
		warn  bool
	}{
		{"3.10 2.00 1.00", 2, true},
		{"2.00 9.00 9.00", 2, false}, // at the core count, and only the 1-minute figure counts
		{"0.50 0.40 0.30", 2, false},
		{"", 2, false},
		{"12.5 3 3", 8, true},
	} {
		rep := newReport("fake", Config{})
		rep.Env = &Environment{LoadAvgStart: tc.load, Cores: tc.cores}
		md := rep.Markdown()
		got := strings.Contains(md, "Warning: a busy machine")
		if got != tc.warn {
			t.Errorf("load %q on %d cores: warning %v, want %v:\n%s", tc.load, tc.cores, got, tc.warn, md)
		}
		if tc.warn && !strings.Contains(md, "load average was "+strings.Fields(tc.load)[0]) {
			t.Errorf("load %q: the warning does not give the load:\n%s", tc.load, md)
		}
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/tmp/go-build123/b001/exe/chunkd-bench", "sql", "--out", "/tmp/a b"}, "go run ./cmd/chunkd-bench sql --out '/tmp/a b'"},
		{[]string{"./chunkd-bench", "sql", "--scale", "large"}, "./chunkd-bench sql --scale large"},
	} {
		if got := commandLine(tc.args); got != tc.want {
			t.Errorf("commandLine(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
