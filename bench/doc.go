// Package bench holds chunkd's benchmark suites and the reports they
// write. The command chunkd-bench runs them:
//
//	go run ./cmd/chunkd-bench sql --scale small --out /tmp/bench-sql
//	go run ./cmd/chunkd-bench -h    # every flag, and the registered suites
//
// docs/benchmarks.md is the reference for users: what each suite
// measures, what each figure in a report means, the method, and the
// current results. This comment is for whoever changes the package.
//
// # The parts
//
//   - suite.go: the Suite interface, the registry (Register, Lookup,
//     Suites: chunkd-bench's help lists from it), Config and Scale, and
//     Run, which makes the Runner, collects the environment, runs the
//     suite and writes the report, also after an error.
//   - measure.go: Drive runs a Load (clients in a closed loop, warm-up,
//     a duration or a count) of an Op; Summarize folds runs into a Result
//     whose every figure is the median over the runs.
//   - report.go, plot.go, env.go: report.md, results.csv, metrics.csv,
//     environment.json and the PNG plots (gonum.org/v1/plot: the reason
//     the suites are a command of their own, which chunkd does not link).
//   - disk.go, chunks.go (with nginx.go), bigdata.go, sql.go, sysbench.go,
//     title5.go, clone.go: one suite each; sqlrig.go, sqlpaths.go and
//     dataset.go are what the three SQL suites share (the data sets, the
//     service child, the paths a page takes); service.go runs child
//     processes in memory cgroups, proc.go reads /proc and the service's
//     metrics.
//
// # Adding a suite
//
// A suite implements Suite (Name, Synopsis, Run) and calls Register from
// an init function; chunkd-bench -h lists it. Run gets a Runner with the
// Config (zero fields take the scale's defaults: use pick), the Report to
// fill (Add a Result per case, path and thread count, usually from
// Summarize over the runs' Stats; Metric, Section, Notef, Samples for
// histograms; Env.Set for the suite's facts) and a WorkDir for scratch
// files. Runs are outermost (run 1 of every path and client count, then
// run 2), so drift on a shared machine falls on every path alike. The
// package writes the report files when Run returns, with the cases that
// finished. TestSuites runs every registered suite at a tiny scale.
package bench
