package main

import (
	"context"
	"fmt"
	"time"

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
	fs := newFlags("log", "log --store URL --db NAME [--at ROOT] [-n N]", c.stderr)
	var d dbFlags
	d.add(fs, "database name")
	at := fs.String("at", "", "start from this version instead of the latest")
	n := fs.Int("n", 0, "show at most this many versions (0: all)")
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
	cl, err := client.Open(ctx, client.Options{Store: st, DB: d.db})
	if err != nil {
		return err
	}
	defer cl.Close()
	var from addr.Addr
	if *at != "" {
		if from, err = addr.Parse(*at); err != nil {
			return usagef("--at: %v", err)
		}
	} else if from, err = sqlchunks.Head(ctx, cl); err != nil {
		return err
	}
	versions, err := sqlchunks.Log(ctx, cl, from, *n)
	if err != nil {
		return err
	}
	for _, v := range versions {
		fmt.Fprintf(c.stdout, "version %s\n  parent  %s\n  date    %s\n  pages   %d × %d bytes\n", v.Root, rootText(v.Parent), v.Time.UTC().Format(time.RFC3339), v.Pages, v.PageSize)
		if v.Message != "" {
			fmt.Fprintf(c.stdout, "  message %s\n", v.Message)
		}
		fmt.Fprintln(c.stdout)
	}
	return nil
}
