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
	fs := newFlags("import", "import --store URL --db NAME [--message M] [--page-size N] [--appendix=false] FILE.sqlite", c.stderr)
	var d dbFlags
	d.add(fs, "database name in the store")
	message := fs.String("message", "", "a message recorded with the version")
	pageSize := fs.Int("page-size", 0, "re-page the database at import (e.g. 16384 or 65536: fewer, larger chunks); 0 keeps the file's")
	appendix := fs.Bool("appendix", true, "also write an appendix file with every chunk of the version in page order, which the cache service downloads on a miss")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one SQLite file to import")
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	p := newProgress(c.stderr, "import")
	res, err := sqlchunks.Import(ctx, st, fs.Arg(0), sqlchunks.ImportOptions{
		DB: d.db, Message: *message, PageSize: *pageSize, Appendix: *appendix,
		Progress: func(phase string, done, total int64) { p.update(phase, done, total) },
	})
	p.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "imported %s as database %q in %s, version %s (parent %s)\n", fs.Arg(0), d.db, store.Redact(st.String()), res.Root, rootText(res.Parent))
	fmt.Fprintf(c.stdout, "  %d pages of %d bytes, %d distinct chunks, %d new\n", res.Pages, res.PageSize, res.Chunks, res.NewChunks)
	if res.TableFile != "" {
		fmt.Fprintf(c.stdout, "  new table file %s: %d bytes\n", res.TableFile, res.TableBytes)
	}
	if res.AppendixFile != "" {
		fmt.Fprintf(c.stdout, "  appendix %s: %d bytes\n", res.AppendixFile, res.AppendixBytes)
	}
	fmt.Fprintf(c.stdout, "  took %v\n", res.Elapsed.Round(1e6))
	return nil
}
