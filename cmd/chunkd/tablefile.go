package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/tablefile"
)

// tablefileCommand inspects table files: ls, get, verify.
type tablefileCommand struct{ cmdBase }

const tablefileUsage = `tablefile ls FILE | get FILE ADDR | verify FILE

  ls      one line per chunk: <address> <offset> <stored length> <uncompressed length>,
          then chunks=N uncompressed=B format=<classic|archive-vN> name=<name or ->
  get     write the chunk's bytes to stdout
  verify  check every CRC and that every chunk hashes to its address;
          exit 1 on any corruption`

func (c *tablefileCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("tablefile", tablefileUsage, c.stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		return usagef("missing subcommand: ls, get or verify")
	}
	sub, args := args[0], args[1:]
	want := map[string]int{"ls": 1, "get": 2, "verify": 1}
	n, ok := want[sub]
	if !ok {
		return usagef("unknown subcommand %q: want ls, get or verify", sub)
	}
	if len(args) != n {
		return usagef("%s takes %d argument(s), got %d", sub, n, len(args))
	}
	tab, closeFile, err := openTableFile(args[0])
	if err != nil {
		return err
	}
	defer closeFile()
	switch sub {
	case "ls":
		return c.ls(tab)
	case "get":
		a, err := addr.Parse(args[1])
		if err != nil {
			return usagef("%v", err)
		}
		data, err := tab.Get(a)
		if err != nil {
			return fmt.Errorf("%s: %w", args[0], err)
		}
		_, err = c.stdout.Write(data)
		return err
	default:
		return c.verify(tab, args[0])
	}
}

func openTableFile(path string) (*tablefile.Table, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if filepath.Base(path) == manifest.JournalName {
		f.Close()
		return nil, nil, fmt.Errorf("%s is a Dolt chunk journal, not a table file: Dolt folds it into table files on 'dolt gc'", path)
	}
	if st.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is a directory, not a table file", path)
	}
	tab, err := tablefile.Open(f, st.Size(), nil)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return tab, func() { f.Close() }, nil
}

func (c *tablefileCommand) ls(tab *tablefile.Table) error {
	w := bufio.NewWriterSize(c.stdout, 1<<16)
	var total uint64
	err := tab.Walk(func(e tablefile.Entry, stored []byte) error {
		data, err := tab.Decode(e, stored)
		if err != nil {
			return err
		}
		total += uint64(len(data))
		_, err = fmt.Fprintf(w, "%s %d %d %d\n", e.Addr, e.Offset, e.Length, len(data))
		return err
	})
	if err != nil {
		w.Flush()
		return err
	}
	name := tab.Name()
	if name == "" {
		name = "-"
	}
	fmt.Fprintf(w, "chunks=%d uncompressed=%d format=%s name=%s\n", tab.Count(), total, tab.Format(), name)
	return w.Flush()
}

func (c *tablefileCommand) verify(tab *tablefile.Table, path string) error {
	base := filepath.Base(path)
	want := ""
	if addr.TextSize == len(base) {
		want = base // a classic file named by its index hash
	}
	bad := 0
	n, err := tab.Verify(want, func(p tablefile.Problem) {
		bad++
		fmt.Fprintf(c.stdout, "BAD %v\n", p.Err)
	})
	if err != nil {
		return err
	}
	if bad > 0 {
		fmt.Fprintf(c.stdout, "%s: %d of %s checked, %s\n", path, n, count(int64(tab.Count()), "chunk"), count(int64(bad), "problem"))
		return errExit1
	}
	fmt.Fprintf(c.stdout, "%s: ok, %s, format %s\n", path, count(int64(n), "chunk"), tab.Format())
	return nil
}
