package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
)

// This file is what serving whole table files needs from the cache (Dolt's
// remote protocol, package doltremote, is its user): a database's files as
// of its manifest, where chunks sit in them, and their bytes, every one
// proven before it leaves.

// Snapshot is a database as of the manifest the service last loaded.
type Snapshot struct {
	DB   string
	Root addr.Addr
	// Format and Version are the manifest's storage format (nbf) and
	// manifest version; both empty while the database is served from its
	// saved state because the store could not be read.
	Format, Version string
	// Journal says the manifest names a chunk journal, which is not a
	// table file and which the service does not serve.
	Journal bool
	// Unopened counts table files the manifest names that the service
	// could not open (unreadable, or not on disk while the store is
	// failing); they are not in Files.
	Unopened int
	Files    []FileInfo // appendix files first
}

// FileInfo is one table file of a Snapshot.
type FileInfo struct {
	Name     string // as in the manifest, without ".darc"
	Archive  bool   // stored as a Dolt archive (<name>.darc)
	Size     int64
	Chunks   int
	DataEnd  int64 // where chunk data ends and the index begins
	Appendix bool
}

// Size returns the bytes of all the snapshot's files.
func (s Snapshot) Size() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

// Snapshot returns database db's files and root. A copy of the manifest
// older than ManifestTTL is read again first, so a client asking for the
// root sees a push within ManifestTTL; if the store fails meanwhile, the
// copy the service has is returned (and the failure logged).
func (c *Cache) Snapshot(ctx context.Context, db string) (Snapshot, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return Snapshot{}, err
	}
	if !d.fresh() {
		if err := d.refreshShared(ctx); err != nil {
			if !isStoreFailure(err) {
				return Snapshot{}, err
			}
			c.log.Warn("store failing: serving the database as of its last manifest", "db", db, "err", err)
		}
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	s := Snapshot{DB: d.name, Root: d.root, Unopened: d.missing}
	if d.m != nil {
		s.Format, s.Version = d.m.NBF, d.m.Version
		for _, spec := range d.m.Specs {
			s.Journal = s.Journal || manifest.IsJournal(spec.Name)
		}
	}
	for _, t := range d.tables {
		s.Files = append(s.Files, FileInfo{
			Name: t.name, Archive: strings.HasSuffix(t.key, manifest.ArchiveSuffix),
			Size: t.size, Chunks: t.idx.Count(), DataEnd: t.idx.DataEnd(), Appendix: t.appendix.Load(),
		})
	}
	return s, nil
}

// Prefetch starts downloading the named table files of database db (as in
// Snapshot), all at once: a client is about to read each of them whole
// (a Dolt clone listing a database's files), so each costs what its
// whole-file read would, and admission decides as it would on that read.
// A client that reads files a few at a time then finds the later ones on
// their way or on disk, rather than each waiting its turn for the store.
// Files on disk, downloading, or unknown are left as they are.
func (c *Cache) Prefetch(ctx context.Context, db string, names []string) error {
	d, err := c.database(ctx, db)
	if err != nil {
		return err
	}
	for _, name := range names {
		d.mu.RLock()
		t := d.byName[name]
		d.mu.RUnlock()
		if t == nil {
			continue
		}
		if lc := t.acquireLocal(); lc != nil {
			lc.cf.release()
			continue
		}
		t.missed(t.size)
	}
	return nil
}

// Location is where one chunk's stored bytes are in a table file.
type Location struct {
	File   string // the table file's name as in Snapshot; "" if the database lacks the chunk
	Offset uint64
	Length uint32
	// DictOffset and DictLength locate the archive dictionary the chunk
	// was compressed with; DictLength is 0 for a snappy record.
	DictOffset uint64
	DictLength uint32
}

// Locate finds addrs in database db, without IO unless the manifest is
// stale or an address is in no file it knows (then it reads the manifest
// again, once).
func (c *Cache) Locate(ctx context.Context, db string, addrs []addr.Addr) ([]Location, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]Location, len(addrs))
	var misses []int
	locate := func(i int) error {
		t, e, err := d.find(ctx, addrs[i])
		if err != nil || t == nil {
			return err
		}
		out[i] = Location{File: t.name, Offset: e.Offset, Length: e.Length}
		if off, n, ok := t.idx.DictSpan(e); ok {
			out[i].DictOffset, out[i].DictLength = off, n
		}
		return nil
	}
	for i := range addrs {
		if err := locate(i); err != nil {
			return nil, err
		}
		if out[i].File == "" {
			misses = append(misses, i)
		}
	}
	// What no known file holds is looked for again, once, after a read of
	// the manifest now (a version published a moment ago).
	if len(misses) > 0 {
		if err := d.refreshNow(ctx); err != nil {
			return nil, err
		}
		for _, i := range misses {
			if err := locate(i); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// FileReader reads one table file of a database, for whole-file and ranged
// downloads.
type FileReader struct {
	t *table
}

// FileStats counts the bytes a copy took from each place.
type FileStats struct {
	Disk    int64 // the verified copy on disk
	Partial int64 // the part of a download in flight that had arrived
	Store   int64 // the object store (read through)
}

// OpenFile returns a reader of table file name (as in Snapshot) of
// database db. A name the database does not have is a KindUnknownFile
// error (wrapping ErrNoFile); a manifest older than ManifestTTL is read
// again first, to find a file added since.
func (c *Cache) OpenFile(ctx context.Context, db, name string) (*FileReader, error) {
	d, err := c.database(ctx, db)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		d.mu.RLock()
		t := d.byName[name]
		d.mu.RUnlock()
		if t != nil {
			return &FileReader{t: t}, nil
		}
		if attempt > 0 || d.fresh() {
			return nil, &Error{Kind: KindUnknownFile, Msg: fmt.Sprintf("database %q has no table file %q", db, name), Err: ErrNoFile}
		}
		if err := d.refreshShared(ctx); err != nil {
			return nil, err
		}
	}
}

// ErrNoFile is the cause of OpenFile's error for a file the database does
// not have.
var ErrNoFile = errors.New("no such table file")

// Size returns the file's size in bytes.
func (r *FileReader) Size() int64 { return r.t.size }

// Blocks Copy reads at once: from the copy on disk, from a download in
// flight (the blocks are proven by the download, and checked as read:
// 64 KiB first, so that the client's first byte does not wait for a
// large block, doubling to 1 MiB), and from the store, where each read
// costs a round trip.
const (
	diskBlock          = 4 << 20
	firstDownloadBlock = 64 << 10
	downloadBlock      = 1 << 20
	storeBlock         = 4 << 20
)

// Copy writes bytes [off, off+n) of the file to w, block by block, each
// block widened to whole units (tablefile.Unit: records, archive spans,
// the index region) and proven before any of it is written:
//
//   - from the verified copy on disk: every unit against the copy's sums
//     (records and spans by CRC-32C, the index region by SHA-256);
//   - from a download in flight: its blocks, each proven once by the
//     download as it arrived (every chunk decoded and hashed to its
//     address, every archive dictionary by decoding a chunk made with it,
//     the index region by its SHA-256), checked as a cached copy's are.
//     Copy starts streams for the next readAheadWindow bytes it will
//     want, so the file arrives at the store's pace, several ranges at
//     once, whatever else is downloading, and waits for the block it
//     sends next;
//   - else from the store: every unit proven as above.
//
// A Copy that is not served from disk counts as a miss of the bytes it
// asks for (admission may start the file's download). An error after some
// bytes were written leaves w short: an HTTP caller must cut its response.
func (r *FileReader) Copy(ctx context.Context, w io.Writer, off, n int64) (FileStats, error) {
	var st FileStats
	t := r.t
	if off < 0 || n < 0 || off+n > t.size {
		return st, Errorf(KindBadRequest, nil, "range [%d, %d) is outside %s (%d bytes)", off, off+n, t.key, t.size)
	}
	end := off + n
	missed := false
	dlBlock := int64(firstDownloadBlock)
	// The store's blocks too start small and grow: the first bytes wait
	// for less, and a corrupt unit further on cuts the answer after the
	// good bytes before it rather than failing it whole.
	stBlock := int64(downloadBlock)
	for off < end {
		if err := ctx.Err(); err != nil {
			return st, Errorf(KindCanceled, err, "copy %s", t.key)
		}
		t.env.lastRead.Store(time.Now().UnixNano())
		if lc := t.acquireLocal(); lc != nil {
			blockEnd := min(end, off+diskBlock)
			lo, hi, units := t.extent(off, blockEnd)
			buf := make([]byte, hi-lo)
			_, err := lc.cf.ReadAt(buf, lo)
			t.env.metrics.diskReads.Inc()
			if err == nil {
				err = t.checkLocal(lc.view, buf, lo, units)
			}
			lc.cf.release()
			if err == nil {
				written, err := w.Write(buf[off-lo : blockEnd-lo])
				st.Disk += int64(written)
				if err != nil {
					return st, err
				}
				off = blockEnd
				continue
			}
			t.localFailed(lc, err) // the copy is dropped if it changed; the block is read again below
		}
		if !missed {
			// The caller wants all of it: reading it through costs what
			// downloading it would, so admission may download it now.
			t.missed(end - off)
			missed = true
		}
		block := stBlock
		stBlock = min(2*stBlock, storeBlock)
		if dl := t.acquireDownload(true); dl != nil {
			blockEnd := min(end, off+dlBlock)
			dlBlock = min(2*dlBlock, downloadBlock)
			buf, err := r.readDownload(ctx, dl, off, blockEnd, end)
			t.releaseDownload(dl)
			if err == nil {
				written, err := w.Write(buf)
				st.Partial += int64(written)
				if err != nil {
					return st, err
				}
				off = blockEnd
				continue
			}
			if !readElsewhere(err) {
				return st, err
			}
			block = downloadBlock // this block from the store; the download may have the next
		}
		blockEnd := min(end, off+block)
		lo, hi, units := t.extent(off, blockEnd)
		buf, err := r.readStore(ctx, lo, hi, units)
		if err != nil {
			return st, err
		}
		written, err := w.Write(buf[off-lo : blockEnd-lo])
		st.Store += int64(written)
		if err != nil {
			return st, err
		}
		off = blockEnd
	}
	return st, nil
}

// readDownload returns bytes [off, blockEnd) from download dl (held),
// once the blocks holding them are proven, checked as read; first it
// starts streams for what the reader wants next, up to end. An error
// readElsewhere accepts sends the block to the store.
func (r *FileReader) readDownload(ctx context.Context, dl *download, off, blockEnd, end int64) ([]byte, error) {
	t := r.t
	dl.readAhead(off, min(end, off+readAheadWindow))
	lo, hi, units := t.extent(off, blockEnd)
	if _, err := dl.ensure(ctx, lo, hi, nil, false); err != nil {
		return nil, err
	}
	buf := make([]byte, hi-lo)
	_, err := dl.f.ReadAt(buf, lo)
	t.env.metrics.diskReads.Inc()
	if err == nil {
		err = dl.checkUnits(buf, lo, units)
	}
	if err != nil {
		t.env.log.Warn("read downloading file", "key", t.key, "err", err)
		return nil, errGaveUp
	}
	return buf[off-lo : blockEnd-lo], nil
}

// readStore reads [lo, hi) from the store and proves its units.
func (r *FileReader) readStore(ctx context.Context, lo, hi int64, units []tablefile.Unit) ([]byte, error) {
	t := r.t
	buf := make([]byte, hi-lo)
	rctx, cancel := context.WithTimeout(ctx, t.env.cfg.StoreTimeout)
	defer cancel()
	rctx, origin := store.TrackOrigin(rctx)
	n, err := t.env.store.ReadAt(rctx, t.key, buf, lo)
	t.env.metrics.storeRead(n, origin)
	if err != nil {
		return nil, storeErr(err, "read bytes %d to %d of %s", lo, hi, t.key)
	}
	if err := r.prove(buf, lo, hi, units); err != nil {
		if errors.Is(err, tablefile.ErrCorrupt) {
			return nil, t.corruptInStore(err)
		}
		return nil, err
	}
	return buf, nil
}

// prove proves units (buf holds the file from offset lo to hi) read from
// somewhere other than a verified copy.
func (r *FileReader) prove(buf []byte, lo, hi int64, units []tablefile.Unit) error {
	t := r.t
	for _, u := range units {
		b := buf[int64(u.Offset)-lo : int64(u.End())-lo]
		switch u.Kind {
		case tablefile.UnitChunk:
			if _, err := t.prove(u.Entry, b); err != nil {
				return err
			}
		case tablefile.UnitDict:
			if err := r.proveDict(u, b, buf, lo, hi); err != nil {
				return err
			}
		default: // the index region, or a span no chunk refers to
			checked, err := t.idx.CheckUnit(u, b)
			if err != nil {
				return err
			}
			if !checked {
				return &tablefile.CorruptError{Offset: int64(u.Offset), Reason: "nothing proves this span: no chunk refers to it"}
			}
		}
	}
	return nil
}

// proveDict proves an archive dictionary span b by decoding, with it, a
// chunk compressed with it (from buf when buf holds it, else the store)
// and hashing the chunk.
func (r *FileReader) proveDict(u tablefile.Unit, b, buf []byte, lo, hi int64) error {
	t := r.t
	e := u.Entry
	var stored []byte
	if int64(e.Offset) >= lo && int64(e.End()) <= hi {
		stored = buf[int64(e.Offset)-lo : int64(e.End())-lo]
	} else {
		stored = make([]byte, e.Length)
		if _, err := (storeFile{t.env, t.key}).ReadAt(stored, int64(e.Offset)); err != nil {
			return storeErr(err, "read chunk %s of %s to prove its dictionary", e.Addr, t.key)
		}
	}
	return t.proveDictWith(u, b, stored)
}

// spanReader reads one span of a file held in memory, and nothing else.
type spanReader struct {
	off int64
	b   []byte
}

func (s spanReader) ReadAt(p []byte, off int64) (int, error) {
	if off < s.off || off+int64(len(p)) > s.off+int64(len(s.b)) {
		return 0, fmt.Errorf("read [%d +%d) outside the span at %d", off, len(p), s.off)
	}
	return copy(p, s.b[off-s.off:]), nil
}
