// Command chunkd is a read cache for databases whose table files live in
// object storage. Run "chunkd help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/store"

	_ "github.com/chunkd/chunkd/store/folder" // file:// and plain paths
	_ "github.com/chunkd/chunkd/store/s3"     // s3://
)

// command is one subcommand: it parses its own flags and runs.
type command interface {
	Name() string
	Synopsis() string
	Run(ctx context.Context, args []string) error
}

// usageError is returned for bad flags or arguments; main prints it with
// the command's usage and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// cmdBase is what every command has: its name, its line in "chunkd help",
// and where it writes.
type cmdBase struct {
	name, synopsis string
	stdout, stderr io.Writer
}

func (b *cmdBase) Name() string     { return b.name }
func (b *cmdBase) Synopsis() string { return b.synopsis }

func commands(stdout, stderr io.Writer) []command {
	base := func(name, synopsis string) cmdBase {
		return cmdBase{name: name, synopsis: synopsis, stdout: stdout, stderr: stderr}
	}
	return []command{
		&demoCommand{base("demo",
			"the seed's SQL join: local file vs object store vs cache service, side by side")},
		&serveCommand{base("serve",
			"run the chunk cache service (HTTP and gRPC, disk and memory tiers)")},
		&genCommand{base("gen",
			"generate a deterministic SQLite data set (sentences)")},
		&importCommand{base("import",
			"publish a SQLite file to a store as a new version (pages as chunks)")},
		&publishCommand{base("publish",
			"follow a SQLite database another process writes and publish a version after its commits")},
		&compactCommand{base("compact",
			"rewrite a SQLite database's appendix with its current version")},
		&gcCommand{base("gc",
			"delete the table files no retained version of a SQLite database needs")},
		&logCommand{base("log",
			"list the versions of a SQLite database in a store")},
		&sqlCommand{base("sql",
			"run a SQL query on a database in a store (through the tiers) or on a local file")},
		&tablefileCommand{base("tablefile",
			"list, read and verify table files and archives (ls, get, verify)")},
		&statusCommand{base("status",
			"show a running cache service's databases and cache, or wait until it is ready")},
		&versionCommand{base("version",
			"print the module version, commit, Go and SQLite versions")},
	}
}

func main() {
	// CHUNKD_CPUPROFILE=FILE writes a CPU profile of the whole command.
	if path := os.Getenv("CHUNKD_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	pprof.StopCPUProfile()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands(stdout, stderr)
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range cmds {
		if c.Name() != args[0] {
			continue
		}
		start := time.Now()
		err := c.Run(ctx, args[1:])
		var ue usageError
		var sig interrupted
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(context.Cause(ctx), &sig):
			// Whatever the command failed with, a signal stopped it.
			failed(stderr, c.Name(), "interrupted", "", "signal", sig.String())
			return 128 + int(sig.Signal)
		case errors.As(err, &ue):
			failed(stderr, c.Name(), ue.msg, "\nRun 'chunkd "+c.Name()+" -h' for usage.", "hint", "chunkd "+c.Name()+" -h")
			return 2
		case errors.Is(err, errExit1):
			return 1
		case errors.Is(err, store.ErrUnreachable):
			// The store's own message names the deadline of the one
			// request that failed; say how long the command waited in all.
			took := time.Since(start).Round(100 * time.Millisecond)
			failed(stderr, c.Name(), err.Error(), fmt.Sprintf(" (gave up after %v)", took), "gave_up_after", took)
			return 1
		default:
			failed(stderr, c.Name(), err.Error(), "")
			return 1
		}
	}
	if args[0] == "bench" {
		fmt.Fprint(stderr, benchMoved(args[1:]))
		return 2
	}
	fmt.Fprintf(stderr, "chunkd: unknown command %q\n\n", args[0])
	printUsage(stderr, cmds)
	return 2
}

// errExit1 makes a command exit 1 after it has printed its own message.
var errExit1 = errors.New("exit 1")

// failed reports why a command failed: a line "chunkd NAME: MSG" and
// more on stderr, or with --log-format json an error record with the
// command's name and the attributes given.
func failed(stderr io.Writer, name, msg, more string, attrs ...any) {
	if jsonLogs() {
		slog.Error(msg, append([]any{"command", name}, attrs...)...)
		return
	}
	fmt.Fprintf(stderr, "chunkd %s: %s%s\n", name, msg, more)
}

// interrupted is the cause of the context a signal ends. A command it
// stopped exits 128 and the signal's number, as a shell reports a process
// a signal killed: 130 for Ctrl-C.
type interrupted struct{ syscall.Signal }

func (e interrupted) Error() string { return e.Signal.String() + " signal received" }

// Is makes it a context.Canceled, as the cause of a canceled context is.
func (e interrupted) Is(target error) bool { return target == context.Canceled }

// signalContext returns a context that SIGINT or SIGTERM cancels, its
// cause an interrupted, and the function that stops listening.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			cancel(interrupted{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(nil)
		signal.Stop(ch)
	}
}

func printUsage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "chunkd: a read cache for databases in object storage")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: chunkd COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name(), c.Synopsis())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'chunkd COMMAND -h' for a command's flags. Every command takes")
	fmt.Fprintln(w, "--log-format text|json and --log-level debug|info|warn|error.")
}

// newFlags makes a command's flag set with a usage text.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("chunkd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: chunkd %s\n", usage)
		fs.PrintDefaults()
	}
	fs.String("log-format", "text", "log format on stderr: text or json")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	return fs
}

// setupLogging makes the logger that --log-format and --log-level of fs
// ask for the default, on fs's output: the command's messages, the
// service's and the client's all go through it.
func setupLogging(fs *flag.FlagSet) error {
	format, level := fs.Lookup("log-format"), fs.Lookup("log-level")
	if format == nil || level == nil {
		return nil
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level.Value.String())); err != nil {
		return usagef("--log-level must be debug, info, warn or error, not %q", level.Value.String())
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationText}
	var h slog.Handler
	switch format.Value.String() {
	case "text":
		h = slog.NewTextHandler(fs.Output(), opts)
	case "json":
		h = slog.NewJSONHandler(fs.Output(), opts)
	default:
		return usagef("--log-format must be text or json, not %q", format.Value.String())
	}
	slog.SetDefault(slog.New(h))
	return nil
}

// durationText writes a duration as text logs do, "took":"3ms", where
// JSON logs would write bare nanoseconds.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// jsonLogs reports whether the logger in force writes JSON
// (--log-format json): then a command's summary and errors are log
// records too.
func jsonLogs() bool {
	_, ok := slog.Default().Handler().(*slog.JSONHandler)
	return ok
}

// parseFlags parses args, flags and positional arguments in any order
// (chunkd import --db d FILE --message m), leaving the positional ones in
// fs.Args(); everything after "--" is positional. A bad flag becomes a
// usageError (the flag package has already printed why).
//
// The flag package prints a bad flag's error and the whole usage; here the
// error is returned alone (main prints it once, with a pointer to -h) and
// the usage is printed only when asked for with -h.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	restore := func() { fs.Usage = usage; fs.SetOutput(out) }
	err := parseArgs(fs, args)
	restore()
	if errors.Is(err, flag.ErrHelp) {
		usage()
	}
	if err != nil {
		return err
	}
	if err := setupLogging(fs); err != nil {
		return err
	}
	warnURLSecrets(fs)
	return nil
}

func parseArgs(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}
