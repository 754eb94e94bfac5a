// Package testdb builds databases of random chunks in a store, for tests
// and benchmarks: table files written with tablefile.Writer and a manifest
// naming them, exactly as a Dolt remote holds them. For tests it also
// makes the empty store to build in, and opens table files to look into.
package testdb

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// Options shape a generated database.
type Options struct {
	Files     int   // table files (default 1)
	Chunks    int   // chunks per file (default 100)
	ChunkSize int   // bytes per chunk (default 4096)
	Seed      int64 // for the random contents
	// Appendix, if set, also writes one appendix file holding every chunk
	// and names it in the manifest's sidecar.
	Appendix bool
}

// DB is a generated database.
type DB struct {
	Name   string
	Files  []File
	Chunks map[addr.Addr][]byte
	Root   addr.Addr
}

// File is one generated table file.
type File struct {
	Name  string
	Key   string
	Size  int64
	Addrs []addr.Addr // in file order
}

// All returns every chunk address, file by file.
func (db *DB) All() []addr.Addr {
	var out []addr.Addr
	for _, f := range db.Files {
		out = append(out, f.Addrs...)
	}
	return out
}

// Make writes a database called name into s.
func Make(ctx context.Context, s store.Store, name string, o Options) (*DB, error) {
	if o.Files == 0 {
		o.Files = 1
	}
	if o.Chunks == 0 {
		o.Chunks = 100
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = 4096
	}
	mdb, err := manifest.Open(ctx, s, name)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(o.Seed))
	db := &DB{Name: name, Chunks: map[addr.Addr][]byte{}}
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatDolt}
	for f := 0; f < o.Files; f++ {
		var chunks [][]byte
		for i := 0; i < o.Chunks; i++ {
			c := make([]byte, o.ChunkSize)
			rng.Read(c[:o.ChunkSize/2]) // half random: compresses about 2:1
			chunks = append(chunks, c)
		}
		file, err := put(ctx, s, mdb, chunks)
		if err != nil {
			return nil, err
		}
		for i, a := range file.Addrs {
			db.Chunks[a] = chunks[i]
		}
		db.Files = append(db.Files, file)
		m.Specs = append(m.Specs, manifest.Spec{Name: file.Name, Chunks: uint32(len(file.Addrs))})
	}
	db.Root = db.Files[0].Addrs[0]
	if o.Appendix {
		var chunks [][]byte
		for _, f := range db.Files {
			for _, a := range f.Addrs {
				chunks = append(chunks, db.Chunks[a])
			}
		}
		file, err := put(ctx, s, mdb, chunks)
		if err != nil {
			return nil, err
		}
		db.Files = append([]File{file}, db.Files...)
		m.SetAppendix([]manifest.Spec{{Name: file.Name, Chunks: uint32(len(file.Addrs))}})
	}
	m.Root = db.Root
	if err := m.Relock(); err != nil {
		return nil, err
	}
	if _, err := mdb.Update(ctx, "", m); err != nil {
		return nil, fmt.Errorf("write manifest: %w", err)
	}
	return db, nil
}

func put(ctx context.Context, s store.Store, mdb *manifest.DB, chunks [][]byte) (File, error) {
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	var f File
	for _, c := range chunks {
		a, err := w.Add(c)
		if err != nil {
			return f, err
		}
		f.Addrs = append(f.Addrs, a)
	}
	name, err := w.Finish()
	if err != nil {
		return f, err
	}
	key, err := mdb.TableKey(name)
	if err != nil {
		return f, err
	}
	if err := s.Put(ctx, key, buf.Bytes()); err != nil {
		return f, err
	}
	f.Name, f.Key, f.Size = name, key, int64(buf.Len())
	return f, nil
}
