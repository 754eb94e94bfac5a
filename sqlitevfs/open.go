package sqlitevfs

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// DB is a database image registered under a name of its own and opened
// read-only: a *sql.DB whose Close also unregisters the image and releases
// what the opener opened (the file of OpenFile). OpenFile and OpenImage
// (and sqlchunks.OpenVersion) make one; they are the
// Register-Open-Unregister sequence that every reader of this package
// otherwise writes for itself.
type DB struct {
	*sql.DB
	name string
	reg  *registration

	closeOnce sync.Once
	closeErr  error
	cleanup   []func() error
}

// openSeq makes the names of DBs unique within the process.
var openSeq atomic.Uint64

// OpenImage registers p under a new name made from label (any text that
// says what the image is: a path, a database and version) with options o
// (nil for the defaults), and opens it. The DB does not own p: p must
// stay readable until Close; Cleanup adds what Close should release.
func OpenImage(label string, p Pages, o *Options) (*DB, error) {
	name := fmt.Sprintf("%s#%d", label, openSeq.Add(1))
	if len(name) > maxName {
		name = fmt.Sprintf("%s…#%d", label[:maxName/2], openSeq.Add(1))
	}
	if err := Register(name, p, o); err != nil {
		return nil, err
	}
	db, err := Open(name)
	if err != nil {
		Unregister(name)
		return nil, err
	}
	return &DB{DB: db, name: name, reg: lookup(name)}, nil
}

// Cleanup adds fn to what Close calls after unregistering the image (the
// last added first).
func (d *DB) Cleanup(fn func() error) { d.cleanup = append(d.cleanup, fn) }

// OpenFile opens a plain local SQLite database file read-only through the
// VFS, page by page with pread (FilePages), so that it differs from a
// database read through the chunkd tiers only in where the pages come
// from. Close closes the file.
//
// The file is read alone, as an immutable image: a database with a
// non-empty write-ahead log (-wal) or rollback journal (-journal) beside it
// is refused, since changes in those may not be in the file yet (Import
// reads through them).
func OpenFile(path string, o *Options) (*DB, error) {
	for _, side := range []struct{ suffix, what string }{
		{"-wal", "a write-ahead log"},
		{"-journal", "a hot rollback journal (a write in progress, or one a crash left)"},
	} {
		if fi, err := os.Stat(path + side.suffix); err == nil && fi.Size() > 0 && (side.suffix == "-wal" || hotJournal(path+side.suffix)) {
			return nil, fmt.Errorf("%s has %s, %s%s (%d bytes), whose changes may not be in the file yet; "+
				"this read-only view reads the file alone: checkpoint it first (sqlite3 %s 'PRAGMA wal_checkpoint(TRUNCATE)', or close its writers), or publish it with chunkd import, which reads through it",
				path, side.what, filepath.Base(path), side.suffix, fi.Size(), path)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fp, err := NewFilePages(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	d, err := OpenImage("file:"+path, fp, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	d.Cleanup(f.Close)
	return d, nil
}

// hotJournal reports whether the rollback journal at path holds a
// transaction to roll back: its header starts with the journal magic.
// (journal_mode=PERSIST leaves a journal whose header is zeroed.)
func hotJournal(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [8]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false
	}
	return magic == [8]byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7}
}

// Name returns the name the image is registered under (for LastReadError).
func (d *DB) Name() string { return d.name }

// PageReads returns how many pages SQLite has read through the VFS so far,
// over all the DB's connections: the misses of SQLite's own page caches.
func (d *DB) PageReads() int64 { return d.reg.pagesRead.Load() }

// QueryError adds the page source's own error to SQLite's generic "disk
// I/O error", which is all a failed page read otherwise reports.
func (d *DB) QueryError(err error) error {
	if err == nil || !strings.Contains(err.Error(), "disk I/O error") {
		return err
	}
	if cause := LastReadError(d.name); cause != nil {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// Close closes the *sql.DB, unregisters the image and closes what the
// opener opened. It is safe to call more than once.
func (d *DB) Close() error {
	d.closeOnce.Do(func() {
		errs := []error{d.DB.Close(), Unregister(d.name)}
		for i := len(d.cleanup) - 1; i >= 0; i-- {
			errs = append(errs, d.cleanup[i]())
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}
