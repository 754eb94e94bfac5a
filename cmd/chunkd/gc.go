package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// gcCommand deletes the table files no retained version of a SQLite
// database needs.
type gcCommand struct{ cmdBase }

func (c *gcCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("gc", "gc --store URL --db NAME --keep N [--keep-for DUR] [--grace DUR] [--dry-run]", c.stderr)
	var d dbFlags
	d.add(fs, "database name in the store")
	keep := fs.Int("keep", 0, "retain the newest N versions (required, at least 1)")
	keepFor := fs.Duration("keep-for", 0, "also retain every version made within this long (e.g. 720h)")
	grace := fs.Duration("grace", sqlchunks.DefaultGrace, "delete a table file only once it was written, and found unnamed by the manifest, longer ago than this (imports, publishes and readers in flight use such files); 0 deletes at once")
	dryRun := fs.Bool("dry-run", false, "say what would be collected and deleted; change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *keep < 1 {
		return usagef("--keep N is required: the number of versions to retain, at least 1")
	}
	if *grace < 0 || *keepFor < 0 {
		return usagef("--grace and --keep-for must not be negative")
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	o := sqlchunks.CollectOptions{DB: d.db, Keep: *keep, KeepFor: *keepFor, Grace: *grace, DryRun: *dryRun, Step: gcStep()}
	if *grace == 0 {
		o.Grace = -1 // the package's 0 is its default
	}
	res, err := sqlchunks.Collect(ctx, st, o)
	if err != nil {
		return err
	}
	verb, deleted := "", "deleted"
	if *dryRun {
		verb, deleted = "would be ", "would be deleted"
	}
	fmt.Fprintf(c.stdout, "database %q in %s, head %s\n", d.db, store.Redact(st.String()), res.Head)
	fmt.Fprintf(c.stdout, "  %d versions retained, %d %scollected\n", len(res.Retained), len(res.Collected), verb)
	fmt.Fprintf(c.stdout, "  table files named: %s before, %s after (%d %sdropped, %d %srepacked)\n",
		humanize.IBytes(uint64(res.TableBytesBefore)), humanize.IBytes(uint64(res.TableBytesAfter)), len(res.Dropped), verb, len(res.Repacked), verb)
	fmt.Fprintf(c.stdout, "  %d unnamed table files %s (%s freed); %d kept for the grace period (%v)\n",
		len(res.Deleted), deleted, humanize.IBytes(uint64(res.DeletedBytes)), res.Waiting, *grace)
	fmt.Fprintf(c.stdout, "  took %v\n", res.Elapsed.Round(time.Millisecond))
	return nil
}

// gcStep logs each change gc makes at debug level. With CHUNKD_FAILPOINT
// set to "gc:N" it kills the process with SIGKILL before the Nth change
// (from 1): the crash tests' hook.
func gcStep() func(string) {
	n := 0
	at := -1
	if v, ok := strings.CutPrefix(os.Getenv("CHUNKD_FAILPOINT"), "gc:"); ok {
		at, _ = strconv.Atoi(v)
	}
	return func(step string) {
		n++
		slog.Debug("gc", "step", n, "what", step)
		if n == at {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
