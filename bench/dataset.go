package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// dataset is a database of random chunks in a folder store, made file by
// file so that only one table file per core is ever in memory (unlike
// testdb, which keeps every chunk). Chunks are half random, half zeros:
// they compress about 2:1, as testdb's do.
type dataset struct {
	Dir          string        `json:"-"` // the store's folder
	DB           string        `json:"db"`
	Target       int64         `json:"target_bytes"` // table-file bytes asked for
	ChunkSize    int           `json:"chunk_size"`
	FileBytes    int64         `json:"file_bytes"`
	Files        []datasetFile `json:"files"`
	StoredBytes  int64         `json:"stored_bytes"`  // table-file bytes
	RecordBytes  int64         `json:"record_bytes"`  // of which chunk records (the rest: indexes, footers)
	DecodedBytes int64         `json:"decoded_bytes"` // chunk bytes
	Chunks       int           `json:"chunks"`
	Reused       bool          `json:"-"`

	addrs [][]addr.Addr // per file
}

type datasetFile struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	Data   int64  `json:"data"` // bytes of records
}

const datasetInfo = "chunkd-bench-dataset.json"

// storedPerChunk estimates a chunk's bytes in a table file: half of it
// (the random half) after snappy, its CRC, and its index entry.
func storedPerChunk(size int) int64 { return int64(size)/2 + 64 + 4 + 24 }

// makeDataset writes (or finds, from an earlier run with the same shape)
// a database of about target table-file bytes into the folder dir.
func makeDataset(ctx context.Context, r *Runner, dir, db string, target int64, chunkSize int, fileBytes int64) (*dataset, error) {
	if ds, err := loadDataset(dir); err == nil && ds.DB == db && ds.Target == target && ds.ChunkSize == chunkSize && ds.FileBytes == fileBytes {
		if err := ds.loadAddrs(); err == nil {
			ds.Reused = true
			r.Logf("reusing the data set in %s (%d files, %d chunks)", dir, len(ds.Files), ds.Chunks)
			return ds, nil
		}
	}
	os.RemoveAll(dir)
	st, err := store.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	mdb, err := manifest.Open(ctx, st, db)
	if err != nil {
		return nil, err
	}
	perFile := max(1, int(fileBytes/storedPerChunk(chunkSize)))
	total := max(1, int(target/storedPerChunk(chunkSize)))
	nfiles := (total + perFile - 1) / perFile
	ds := &dataset{Dir: dir, DB: db, Target: target, ChunkSize: chunkSize, FileBytes: fileBytes,
		Files: make([]datasetFile, nfiles), addrs: make([][]addr.Addr, nfiles)}
	r.Logf("writing a data set of %d table files (%d chunks of %d bytes) to %s", nfiles, total, chunkSize, dir)

	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	workers := min(runtime.GOMAXPROCS(0), nfiles)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			for i := range jobs {
				n := perFile
				if i == nfiles-1 {
					n = total - perFile*(nfiles-1)
				}
				f, as, err := writeDatasetFile(ctx, st, mdb, &buf, i, n, chunkSize)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				ds.Files[i], ds.addrs[i] = f, as
				done := 0
				for _, x := range ds.addrs {
					if x != nil {
						done++
					}
				}
				mu.Unlock()
				if err == nil && (done%max(1, nfiles/8) == 0 || done == nfiles) {
					r.Logf("  %d/%d table files written", done, nfiles)
				}
			}
		}()
	}
	for i := 0; i < nfiles && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatDolt, Root: ds.addrs[0][0]}
	for _, f := range ds.Files {
		m.Specs = append(m.Specs, manifest.Spec{Name: f.Name, Chunks: uint32(f.Chunks)})
		ds.StoredBytes += f.Size
		ds.RecordBytes += f.Data
		ds.Chunks += f.Chunks
	}
	ds.DecodedBytes = int64(ds.Chunks) * int64(chunkSize)
	if err := m.Relock(); err != nil {
		return nil, err
	}
	if _, err := mdb.Update(ctx, "", m); err != nil {
		return nil, fmt.Errorf("write manifest: %w", err)
	}
	b, _ := json.MarshalIndent(ds, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, datasetInfo), b, 0o644); err != nil {
		return nil, err
	}
	return ds, nil
}

func writeDatasetFile(ctx context.Context, st store.Store, mdb *manifest.DB, buf *bytes.Buffer, i, n, chunkSize int) (datasetFile, []addr.Addr, error) {
	var seed [32]byte
	seed[0], seed[1], seed[2] = byte(i), byte(i>>8), byte(i>>16)
	rng := rand.NewChaCha8(seed)
	buf.Reset()
	w := tablefile.NewWriter(buf)
	chunk := make([]byte, chunkSize)
	as := make([]addr.Addr, 0, n)
	for j := 0; j < n; j++ {
		if j%4096 == 0 && ctx.Err() != nil {
			return datasetFile{}, nil, ctx.Err()
		}
		rng.Read(chunk[:chunkSize/2])
		a, err := w.Add(chunk)
		if err != nil {
			return datasetFile{}, nil, err
		}
		as = append(as, a)
	}
	name, err := w.Finish()
	if err != nil {
		return datasetFile{}, nil, err
	}
	key, err := mdb.TableKey(name)
	if err != nil {
		return datasetFile{}, nil, err
	}
	if err := st.Put(ctx, key, buf.Bytes()); err != nil {
		return datasetFile{}, nil, err
	}
	t, err := tablefile.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), &tablefile.Options{BloomBitsPerKey: -1})
	if err != nil {
		return datasetFile{}, nil, err
	}
	return datasetFile{Name: name, Key: key, Size: int64(buf.Len()), Chunks: n, Data: t.DataEnd()}, as, nil
}

func loadDataset(dir string) (*dataset, error) {
	raw, err := os.ReadFile(filepath.Join(dir, datasetInfo))
	if err != nil {
		return nil, err
	}
	ds := &dataset{Dir: dir}
	if err := json.Unmarshal(raw, ds); err != nil {
		return nil, err
	}
	if len(ds.Files) == 0 {
		return nil, errors.New("no files")
	}
	return ds, nil
}

// loadAddrs reads every file's index to list its addresses, and sums the
// bytes of the files' records.
func (ds *dataset) loadAddrs() error {
	ds.addrs = make([][]addr.Addr, len(ds.Files))
	ds.RecordBytes = 0
	for i, f := range ds.Files {
		fh, err := os.Open(filepath.Join(ds.Dir, filepath.FromSlash(f.Key)))
		if err != nil {
			return err
		}
		fi, err := fh.Stat()
		if err != nil || fi.Size() != f.Size {
			fh.Close()
			return fmt.Errorf("%s: size changed", f.Key)
		}
		t, err := tablefile.Open(fh, fi.Size(), &tablefile.Options{BloomBitsPerKey: -1})
		if err != nil {
			fh.Close()
			return err
		}
		for _, e := range t.Entries() {
			ds.addrs[i] = append(ds.addrs[i], e.Addr)
		}
		ds.RecordBytes += t.DataEnd()
		fh.Close()
	}
	return nil
}

// all returns every address, file by file.
func (ds *dataset) all() []addr.Addr {
	out := make([]addr.Addr, 0, ds.Chunks)
	for _, as := range ds.addrs {
		out = append(out, as...)
	}
	return out
}
