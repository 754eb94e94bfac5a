package bench

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one row of results.csv: one case, path and thread count,
// each figure the median over Runs runs.
type Result struct {
	Suite      string  `json:"suite"`
	Case       string  `json:"case"`    // what varies besides the path: a chunk or block size
	Path       string  `json:"path"`    // how the operation is served: bare-http, http-memory, direct, ...
	Threads    int     `json:"threads"` // concurrent clients, or queue depth
	Count      int64   `json:"count"`   // measured operations
	MeanUS     float64 `json:"mean_us"`
	P50US      float64 `json:"p50_us"`
	P95US      float64 `json:"p95_us"`
	P99US      float64 `json:"p99_us"`
	Throughput float64 `json:"throughput"` // operations per second
	Runs       int     `json:"runs"`
	SpreadPct  float64 `json:"spread_pct"` // (max-min)/median of the runs' p50s, in percent
}

// CSVHeader is the header row of results.csv.
var CSVHeader = []string{"suite", "case", "path", "threads", "count", "mean_us", "p50_us", "p95_us", "p99_us", "throughput", "runs", "spread_pct"}

func (r Result) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	return []string{r.Suite, r.Case, r.Path, strconv.Itoa(r.Threads), strconv.FormatInt(r.Count, 10),
		f(r.MeanUS), f(r.P50US), f(r.P95US), f(r.P99US), f(r.Throughput), strconv.Itoa(r.Runs), f(r.SpreadPct)}
}

// Metric is a figure other than latency and throughput (disk reads per
// read, hit ratios, bytes read), one row of metrics.csv.
type Metric struct {
	Suite   string  `json:"suite"`
	Case    string  `json:"case"`
	Path    string  `json:"path"`
	Threads int     `json:"threads"`
	Name    string  `json:"metric"`
	Value   float64 `json:"value"`
}

// Section is a suite's own part of report.md.
type Section struct {
	Title string
	Body  string // markdown
}

// Report is what a suite measured, and how it is written out.
type Report struct {
	Suite string
	// Intro says what the suite measures (markdown), under the title.
	Intro string
	// Baseline is the path multipliers are computed against; "" for none.
	Baseline string
	// ThreadsLabel names the threads column ("clients", "queue depth").
	ThreadsLabel string
	// ThroughputUnit names the throughput column ("ops/s", "IOPS").
	ThroughputUnit string
	Env            *Environment
	Results        []Result
	Metrics        []Metric
	Sections       []Section
	Notes          []string

	samples map[sampleKey][]time.Duration
	sorder  []sampleKey
	plots   map[string][]string // by case: files written, relative to the out dir
}

type sampleKey struct {
	cs, path string
	threads  int
}

// maxSamples caps the latencies kept per case and path for histograms.
const maxSamples = 200_000

func newReport(suite string, cfg Config) *Report {
	return &Report{Suite: suite, ThreadsLabel: "clients", ThroughputUnit: "ops/s", samples: map[sampleKey][]time.Duration{}}
}

// Add records a result row.
func (r *Report) Add(res Result) { r.Results = append(r.Results, res) }

// Metric records a figure for metrics.csv.
func (r *Report) Metric(cs, path string, threads int, name string, v float64) {
	r.Metrics = append(r.Metrics, Metric{r.Suite, cs, path, threads, name, v})
}

// Section adds a part to report.md, after the result tables.
func (r *Report) Section(title, body string) {
	r.Sections = append(r.Sections, Section{title, body})
}

// Notef adds a caveat to the report's notes.
func (r *Report) Notef(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	for _, old := range r.Notes {
		if old == n {
			return
		}
	}
	r.Notes = append(r.Notes, n)
}

// Samples pools latencies of a case and path at one thread count (keep
// one per case and path) for its histogram.
func (r *Report) Samples(cs, path string, threads int, lat []time.Duration) {
	k := sampleKey{cs, path, threads}
	if _, ok := r.samples[k]; !ok {
		r.sorder = append(r.sorder, k)
	}
	s := append(r.samples[k], lat...)
	if len(s) > maxSamples { // keep a uniform subsample
		rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		s = s[:maxSamples]
	}
	r.samples[k] = s
}

// write writes every report file into dir.
func (r *Report) write(dir string) error {
	var errs []error
	errs = append(errs, r.writeCSV(filepath.Join(dir, "results.csv")))
	errs = append(errs, r.writeMetrics(filepath.Join(dir, "metrics.csv")))
	if r.Env != nil {
		b, err := json.MarshalIndent(r.Env, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "environment.json"), append(b, '\n'), 0o644)
		}
		errs = append(errs, err)
	}
	plots, err := r.writePlots(dir)
	r.plots = plots
	if err != nil {
		r.Notef("Some plots could not be drawn: %v", err)
	}
	errs = append(errs, os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644))
	return errors.Join(errs...)
}

func (r *Report) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(CSVHeader)
	for _, res := range r.Results {
		w.Write(res.record())
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

func (r *Report) writeMetrics(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"suite", "case", "path", "threads", "metric", "value"})
	for _, m := range r.Metrics {
		w.Write([]string{m.Suite, m.Case, m.Path, strconv.Itoa(m.Threads), m.Name, strconv.FormatFloat(m.Value, 'f', 4, 64)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// cases returns the cases in the order they were first recorded.
func (r *Report) cases() []string {
	var out []string
	seen := map[string]bool{}
	for _, res := range r.Results {
		if !seen[res.Case] {
			seen[res.Case] = true
			out = append(out, res.Case)
		}
	}
	return out
}

// paths returns the paths of case cs in the order first recorded.
func (r *Report) paths(cs string) []string {
	var out []string
	seen := map[string]bool{}
	for _, res := range r.Results {
		if res.Case == cs && !seen[res.Path] {
			seen[res.Path] = true
			out = append(out, res.Path)
		}
	}
	return out
}

// threads returns the thread counts of case cs, ascending.
func (r *Report) threads(cs string) []int {
	seen := map[int]bool{}
	var out []int
	for _, res := range r.Results {
		if res.Case == cs && !seen[res.Threads] {
			seen[res.Threads] = true
			out = append(out, res.Threads)
		}
	}
	slices.Sort(out)
	return out
}

func (r *Report) find(cs, path string, threads int) (Result, bool) {
	for _, res := range r.Results {
		if res.Case == cs && res.Path == path && res.Threads == threads {
			return res, true
		}
	}
	return Result{}, false
}

// Markdown renders report.md.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# chunkd-bench %s\n\n", r.Suite)
	if r.Intro != "" {
		b.WriteString(strings.TrimSpace(r.Intro) + "\n\n")
	}
	runs := 0
	if len(r.Results) > 0 {
		runs = r.Results[0].Runs
	}
	fmt.Fprintf(&b, "Each figure is the median over %d runs of a case (each run: a warm-up, then the measured operations); "+
		"latencies are in microseconds, from the client's side; spread is (max − min) / median of the runs' p50s. "+
		"Compare figures side by side within one report: they come from one machine at one time.\n\n", runs)
	if r.Env != nil {
		b.WriteString("## Environment\n\n")
		b.WriteString(r.Env.Markdown())
		b.WriteString("\n")
		if w := r.Env.loadWarning(); w != "" {
			fmt.Fprintf(&b, "**Warning: a busy machine.** %s%s.\n\n", strings.ToUpper(w[:1]), w[1:])
		}
	}
	b.WriteString("## Results\n\n")
	if len(r.Results) == 0 {
		b.WriteString("No case finished.\n\n")
	}
	for _, cs := range r.cases() {
		fmt.Fprintf(&b, "### %s\n\n", cs)
		r.caseTable(&b, cs)
		r.sideBySide(&b, cs)
		for _, p := range r.plots[cs] {
			fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
		}
		b.WriteString("\n")
	}
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", s.Title, strings.TrimSpace(s.Body))
	}
	if len(r.Notes) > 0 {
		b.WriteString("## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	if len(r.samples) > 0 {
		b.WriteString("The histograms pool the operations of every run; the p50 in their titles is of those pooled operations, " +
			"where the tables give the median of the runs' p50s.\n\n")
	}
	b.WriteString("Files: `results.csv` (one row per case, path and thread count), `metrics.csv` (other figures), " +
		"`environment.json` (the block above), and the plots.\n")
	return b.String()
}

func (r *Report) caseTable(b *strings.Builder, cs string) {
	base := r.Baseline
	if _, ok := r.find(cs, base, r.threads(cs)[0]); !ok {
		base = ""
	}
	fmt.Fprintf(b, "| path | %s | count | p50 | p95 | p99 | mean | %s |", r.ThreadsLabel, r.ThroughputUnit)
	if base != "" {
		fmt.Fprintf(b, " p50 × %s | %s × %s |", base, r.ThroughputUnit, base)
	}
	b.WriteString(" spread |\n|---|--:|--:|--:|--:|--:|--:|--:|")
	if base != "" {
		b.WriteString("--:|--:|")
	}
	b.WriteString("--:|\n")
	for _, p := range r.paths(cs) {
		for _, th := range r.threads(cs) {
			res, ok := r.find(cs, p, th)
			if !ok {
				continue
			}
			fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %s |", p, th, res.Count,
				fmtUS(res.P50US), fmtUS(res.P95US), fmtUS(res.P99US), fmtUS(res.MeanUS), fmtRate(res.Throughput))
			if base != "" {
				if br, ok := r.find(cs, base, th); ok {
					fmt.Fprintf(b, " %s | %s |", ratio(res.P50US, br.P50US), ratio(res.Throughput, br.Throughput))
				} else {
					b.WriteString(" | |")
				}
			}
			fmt.Fprintf(b, " %.0f%% |\n", res.SpreadPct)
		}
	}
	b.WriteString("\n")
}

// sideBySide is the articles' table: the baseline's median latency and
// each path's, with the multiplier, one row per thread count.
func (r *Report) sideBySide(b *strings.Builder, cs string) {
	base := r.Baseline
	paths := r.paths(cs)
	var others []string
	found := false
	for _, p := range paths {
		if p == base {
			found = true
		} else {
			others = append(others, p)
		}
	}
	if !found || len(others) == 0 {
		return
	}
	fmt.Fprintf(b, "Median latency side by side (µs; × is the multiple of %s's):\n\n", base)
	fmt.Fprintf(b, "| %s | %s |", r.ThreadsLabel, base)
	for _, p := range others {
		fmt.Fprintf(b, " %s | × |", p)
	}
	b.WriteString("\n|--:|--:|")
	for range others {
		b.WriteString("--:|--:|")
	}
	b.WriteString("\n")
	for _, th := range r.threads(cs) {
		br, ok := r.find(cs, base, th)
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| %d | %s |", th, fmtUS(br.P50US))
		for _, p := range others {
			if res, ok := r.find(cs, p, th); ok {
				fmt.Fprintf(b, " %s | %s |", fmtUS(res.P50US), ratio(res.P50US, br.P50US))
			} else {
				b.WriteString(" | |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func fmtUS(v float64) string { return fmtDigits(v, 10, 1000, 2) }

func fmtRate(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// fmtDigits renders v with most digits after the point below small, one
// fewer below large, and none from large up.
func fmtDigits(v, small, large float64, most int) string {
	switch {
	case v < small:
		return strconv.FormatFloat(v, 'f', most, 64)
	case v < large:
		return strconv.FormatFloat(v, 'f', most-1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func ratio(v, base float64) string {
	if base <= 0 {
		return "–"
	}
	x := v / base
	if x < 0.1 {
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
	if x < 10 {
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strconv.FormatFloat(x, 'f', 0, 64)
}

// fileSafe turns a case name into part of a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
