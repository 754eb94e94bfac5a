package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// demoCommand is the README's first command: on embedded defaults (a
// local-folder store, nothing to install) it writes a table file to the
// store and reads chunks back through it.
type demoCommand struct {
	stdout, stderr io.Writer
}

func (*demoCommand) Name() string { return "demo" }
func (*demoCommand) Synopsis() string {
	return "write a table file to a store and read chunks back through it"
}

func (c *demoCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("demo", "demo [--store URL] [--chunks N] [--chunk-size BYTES]", c.stderr)
	storeURL := fs.String("store", "", "object store URL (default: a new folder under the system temp dir)")
	n := fs.Int("chunks", 10000, "chunks to write")
	size := fs.Int("chunk-size", 4096, "bytes per chunk")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < 1 || *size < 1 {
		return usagef("--chunks and --chunk-size must be positive")
	}
	if *storeURL == "" {
		dir, err := os.MkdirTemp("", "chunkd-demo-")
		if err != nil {
			return err
		}
		*storeURL = filepath.Join(dir, "store")
	}
	s, err := store.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer s.Close()

	// Write: n chunks, half random and half zeros so snappy has work.
	start := time.Now()
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	rng := rand.New(rand.NewSource(1))
	addrs := make([]addr.Addr, 0, *n)
	for i := 0; i < *n; i++ {
		c := make([]byte, *size)
		rng.Read(c[:*size/2])
		a, err := w.Add(c)
		if err != nil {
			return err
		}
		addrs = append(addrs, a)
	}
	name, err := w.Finish()
	if err != nil {
		return err
	}
	key := "demo/" + name
	if err := s.Put(ctx, key, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote %s/%s: %d chunks, %d bytes, in %v\n", s, key, *n, buf.Len(), time.Since(start).Round(time.Millisecond))

	// Read back through the store: footer and index once, then one ranged
	// read per chunk, and one batched pass.
	info, err := s.Head(ctx, key)
	if err != nil {
		return err
	}
	start = time.Now()
	tab, err := tablefile.Open(store.ReaderAt(ctx, s, key), info.Size, &tablefile.Options{Tail: 64 << 10})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "opened index: %d chunks, %s, %d bytes in memory, in %v\n", tab.Count(), tab.Format(), tab.MemSize(), time.Since(start).Round(time.Microsecond))
	sample := addrs
	if len(sample) > 1000 {
		sample = sample[:1000]
	}
	start = time.Now()
	for _, a := range sample {
		data, err := tab.Get(a)
		if err != nil {
			return err
		}
		if addr.Of(data) != a {
			return fmt.Errorf("chunk %s read back wrong", a)
		}
	}
	one := time.Since(start)
	start = time.Now()
	got := 0
	err = tab.GetMany(addrs, tablefile.BatchOptions{Gap: 64 << 10}, func(i int, data []byte) error {
		got++
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "read %d chunks one by one: %v per chunk\n", len(sample), (one / time.Duration(len(sample))).Round(time.Microsecond))
	fmt.Fprintf(c.stdout, "read %d chunks batched: %v\n", got, time.Since(start).Round(time.Millisecond))
	return nil
}
