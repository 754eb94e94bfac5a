// Command chunkd-bench runs chunkd's benchmark suites and writes their
// reports:
//
//	go run ./cmd/chunkd-bench sql --scale small --out /tmp/bench-sql
//	go run ./cmd/chunkd-bench -h    # every flag, and every registered suite
//
// It is a command of its own so that chunkd, the binary an operator
// deploys, links none of the reports' plotting code. The suites that run
// a "chunkd serve" child build chunkd with go build (from the module in
// the current directory) unless --binary names one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/chunkd/chunkd/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad flag or argument: run prints it with a pointer to
// -h and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run runs one suite as args ask and returns the exit code: 0, 1 when the
// suite failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet(&o, stderr)
	if len(args) == 0 || args[0] == "help" {
		fs.Usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	err := o.parse(fs, args)
	if err == nil {
		err = o.Validate()
	}
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "chunkd-bench: %s\nRun 'chunkd-bench -h' for usage.\n", ue.msg)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "chunkd-bench: %v\n", err)
		return 2
	}
	cfg := o.config()
	cfg.Log = stderr
	rep, err := bench.Run(ctx, o.suite, cfg)
	if rep != nil {
		fmt.Fprintln(stdout, filepath.Join(cfg.Out, "report.md"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "chunkd-bench %s: %v\n", o.suite, err)
		return 1
	}
	return 0
}

// newFlagSet is the command's flag set, with o's flags, writing its
// usage to w.
func newFlagSet(o *options, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("chunkd-bench", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() { printUsage(w, fs) }
	o.AddFlags(fs)
	return fs
}

// printUsage prints the command line, the flags and every registered
// suite with its synopsis (bench.Suites: the list cannot drift from the
// suites there are).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "chunkd-bench: chunkd's benchmark suites, each writing a report with its environment")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: chunkd-bench SUITE --out DIR [flags]")
	fmt.Fprintln(w, "       go run ./cmd/chunkd-bench SUITE --out DIR [flags]   (from chunkd's source tree)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Suites:")
	for _, s := range bench.Suites() {
		fmt.Fprintf(w, "  %-9s %s\n", s.Name(), s.Synopsis())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	fs.PrintDefaults()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Writes DIR/report.md, DIR/results.csv, DIR/metrics.csv, DIR/environment.json and PNG plots.")
	fmt.Fprintln(w, "docs/benchmarks.md says what each suite measures and how to read its figures.")
}

// parse reads the suite's name (first or last; chunkd-bench sql --out D
// and chunkd-bench --out D sql are the same) and the flags.
func (o *options) parse(fs *flag.FlagSet, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.suite, args = args[0], args[1:]
	}
	// The flag package prints a bad flag's error and the whole usage;
	// here the error is returned alone and run prints it once.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return err
	}
	if err != nil {
		return usageError{err.Error()}
	}
	rest := fs.Args()
	if o.suite == "" && len(rest) > 0 {
		o.suite, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	return nil
}
