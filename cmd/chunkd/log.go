package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlchunks"
)

// logCommand lists a database's versions, newest first.
type logCommand struct{ cmdBase }

func rootText(a addr.Addr) string {
	if a.IsEmpty() {
		return "none"
	}
	return a.String()
}

func (c *logCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("log", "log --store URL --db NAME [--at ROOT|TIME] [-n N]", c.stderr)
	var d dbFlags
	d.add(fs, "database name")
	atFlag := fs.String("at", "", "start from this version instead of the latest: a root, or a time (the newest version at or before it)")
	n := fs.Int("n", 0, "show at most this many versions (0: all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	at, err := sqlchunks.ParseAt(*atFlag)
	if err != nil {
		return usagef("--at: %v", err)
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	cl, err := client.Open(ctx, client.Options{Store: st, DB: d.db})
	if err != nil {
		return err
	}
	defer cl.Close()
	from, err := sqlchunks.Resolve(ctx, cl, at)
	if err != nil {
		return err
	}
	collected, err := sqlchunks.Collected(ctx, st, d.db)
	if err != nil {
		return err
	}
	versions, err := sqlchunks.History(ctx, cl, collected, from, *n)
	for _, v := range versions {
		fmt.Fprintf(c.stdout, "version %s\n  parent  %s\n  date    %s\n  size    %s (%d pages of %d bytes)\n",
			v.Root, rootText(v.Parent), v.Time.UTC().Format(time.RFC3339), humanize.IBytes(uint64(v.Size())), v.Pages, v.PageSize)
		if v.NewBytes >= 0 {
			fmt.Fprintf(c.stdout, "  new     %s\n", humanize.IBytes(uint64(v.NewBytes)))
		}
		if !v.Collected.IsZero() {
			fmt.Fprintf(c.stdout, "  collected by gc at %s: its pages may no longer read\n", v.Collected.UTC().Format(time.RFC3339))
		}
		if v.Message != "" {
			fmt.Fprintf(c.stdout, "  message %s\n", v.Message)
		}
		fmt.Fprintln(c.stdout)
	}
	return err
}
