package main

import (
	"context"
	"fmt"

	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// importCommand publishes a SQLite database to a store as a new version.
type importCommand struct{ cmdBase }

func (c *importCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("import", "import --store URL --db NAME [--message M] [--page-size N] [--appendix=false] [--appendix-threshold F] FILE.sqlite", c.stderr)
	var d dbFlags
	d.add(fs, "database name in the store")
	message := fs.String("message", "", "a message recorded with the version")
	pageSize := fs.Int("page-size", 0, "re-page the database at import (e.g. 16384 or 65536: fewer, larger chunks); 0 keeps the file's")
	appendix := fs.Bool("appendix", true, "keep an appendix: a file with every chunk of a version in page order, which the cache service downloads on a miss")
	threshold := fs.Float64("appendix-threshold", sqlchunks.DefaultAppendixThreshold, "rewrite the appendix with this version when the pages it lacks would exceed this fraction of the version's pages (else only the new pages are written)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one SQLite file to import")
	}
	if *threshold <= 0 || *threshold > 1 {
		return usagef("--appendix-threshold must be a fraction above 0 and at most 1, not %g", *threshold)
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	p := newProgress(c.stderr, "import")
	res, err := sqlchunks.Import(ctx, st, fs.Arg(0), sqlchunks.ImportOptions{
		DB: d.db, Message: *message, PageSize: *pageSize, Appendix: *appendix, AppendixThreshold: *threshold,
		Progress: func(phase string, done, total int64) { p.update(phase, done, total) },
	})
	p.done()
	if err != nil {
		return err
	}
	if res.Unchanged {
		fmt.Fprintf(c.stdout, "%s is unchanged since version %s of database %q in %s: nothing published\n", fs.Arg(0), res.Root, d.db, store.Redact(st.String()))
		return nil
	}
	fmt.Fprintf(c.stdout, "imported %s as database %q in %s, version %s (parent %s)\n", fs.Arg(0), d.db, store.Redact(st.String()), res.Root, rootText(res.Parent))
	fmt.Fprintf(c.stdout, "  %s of %d bytes, %s, %d new\n", count(res.Pages, "page"), res.PageSize, count(int64(res.Chunks), "distinct chunk"), res.NewChunks)
	if res.TableFile != "" {
		fmt.Fprintf(c.stdout, "  new table file %s: %d bytes\n", res.TableFile, res.TableBytes)
	}
	if len(res.Merged) > 0 {
		fmt.Fprintf(c.stdout, "  it took in %d small table files\n", len(res.Merged))
	}
	switch {
	case res.AppendixFile != "":
		fmt.Fprintf(c.stdout, "  new appendix %s: %d bytes\n", res.AppendixFile, res.AppendixBytes)
	case *appendix:
		fmt.Fprintf(c.stdout, "  the appendix lacks %d of its %d pages (%.1f%%; rewritten past %.1f%%, or with 'chunkd compact')\n", res.Lacking, res.Pages, 100*float64(res.Lacking)/float64(max(res.Pages, 1)), 100**threshold)
	}
	fmt.Fprintf(c.stdout, "  %d bytes written to the store; took %v\n", res.StoreBytes, res.Elapsed.Round(1e6))
	return nil
}

// compactCommand rewrites a database's appendix with its current version.
type compactCommand struct{ cmdBase }

func (c *compactCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("compact", "compact --store URL --db NAME", c.stderr)
	var d dbFlags
	d.add(fs, "database name in the store")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	p := newProgress(c.stderr, "compact")
	res, err := sqlchunks.Compact(ctx, st, d.db, func(phase string, done, total int64) { p.update(phase, done, total) })
	p.done()
	if err != nil {
		return err
	}
	if res.AppendixFile == "" {
		fmt.Fprintf(c.stdout, "the appendix of database %q holds every page of version %s already: nothing written\n", d.db, res.Root)
		return nil
	}
	fmt.Fprintf(c.stdout, "new appendix %s of database %q: version %s, %d pages (the old one lacked %d), %d bytes; took %v\n",
		res.AppendixFile, d.db, res.Root, res.Pages, res.Lacking, res.AppendixBytes, res.Elapsed.Round(1e6))
	return nil
}
