//go:build cgo && !chunkd_ext

package sqlchunks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"
)

// snapshot writes a consistent copy of the SQLite database at src to the
// empty file dst.
//
// With pageSize 0 it uses SQLite's online backup API, which copies the
// database page for page (page n of the copy is page n of the source, WAL
// contents included) while holding a read transaction on the source, so
// pages that did not change since the last import hash the same and are
// not uploaded again. Only page 1's header differs a little (SQLite bumps
// the copy's change counter and schema cookie).
//
// With a pageSize it runs VACUUM INTO with that page size instead: a
// rewritten, compacted copy (pages of later versions then match less,
// since VACUUM lays the file out anew).
func snapshot(ctx context.Context, src, dst string, pageSize int) error {
	srcConn, err := openConn(ctx, src, "?mode=ro&_busy_timeout=10000")
	if err != nil {
		return err
	}
	defer srcConn.Close()
	if pageSize != 0 {
		if _, err := srcConn.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", pageSize)); err != nil {
			return fmt.Errorf("%s: set page size: %w", src, err)
		}
		if _, err := srcConn.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
			return fmt.Errorf("%s: VACUUM INTO a copy with %d-byte pages: %w", src, pageSize, err)
		}
		return nil
	}

	dstConn, err := openConn(ctx, dst, "")
	if err != nil {
		return err
	}
	defer dstConn.Close()
	// The copy is scratch: no journal, no syncs.
	for _, p := range []string{"PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF"} {
		if _, err := dstConn.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("%s: %s: %w", dst, p, err)
		}
	}
	return dstConn.Raw(func(dc any) error {
		return srcConn.Raw(func(sc any) error {
			d, ok1 := dc.(*sqlite3.SQLiteConn)
			s, ok2 := sc.(*sqlite3.SQLiteConn)
			if !ok1 || !ok2 {
				return errors.New("unexpected SQLite driver connection type")
			}
			bk, err := d.Backup("main", s, "main")
			if err != nil {
				return fmt.Errorf("back up %s: %w", src, err)
			}
			// Step(-1) copies everything in one read transaction; it
			// reports a busy or locked source as not done, so try again
			// for a while (the source's busy timeout applies too).
			deadline := time.Now().Add(30 * time.Second)
			for {
				done, err := bk.Step(-1)
				if err != nil {
					bk.Finish()
					return fmt.Errorf("back up %s: %w", src, err)
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					bk.Finish()
					return fmt.Errorf("back up %s: the database stayed locked by other connections for 30s", src)
				}
				select {
				case <-ctx.Done():
					bk.Finish()
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
			if err := bk.Finish(); err != nil {
				return fmt.Errorf("back up %s: %w", src, err)
			}
			return nil
		})
	})
}

// uriFile returns an SQLite URI filename for path, with the characters
// that mean something in a URI escaped.
func uriFile(path string) string {
	const hex = "0123456789ABCDEF"
	b := []byte("file:")
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '%' || c == '?' || c == '#' || c < ' ' || c == 0x7f:
			b = append(b, '%', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// openConn opens one connection to the SQLite file at path, with the URI
// parameters params ("" or "?..."). Closing the connection closes its
// pool.
func openConn(ctx context.Context, path, params string) (*dbConn, error) {
	db, err := sql.Open("sqlite3", uriFile(path)+params)
	if err != nil {
		return nil, err
	}
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &dbConn{Conn: c, db: db}, nil
}

// dbConn is a connection that owns its pool.
type dbConn struct {
	*sql.Conn
	db *sql.DB
}

func (c *dbConn) Close() error {
	err := c.Conn.Close()
	if cerr := c.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// liveSource is a connection to a SQLite database that another process
// writes, for Publisher: it tells whether the database changed, and reads
// a consistent image of it.
type liveSource struct {
	path string
	conn *dbConn
}

// openLive opens path read-only (SQLite's own locks: a read lock while
// it reads, nothing else), with a busy timeout for a writer's commit.
func openLive(ctx context.Context, path string) (*liveSource, error) {
	conn, err := openConn(ctx, path, "?mode=ro&_busy_timeout=5000")
	if err != nil {
		return nil, err
	}
	return &liveSource{path: path, conn: conn}, nil
}

func (l *liveSource) Close() error { return l.conn.Close() }

// dataVersion is SQLite's PRAGMA data_version on the connection: it
// changes when another connection commits (in WAL mode it reads the
// shared memory; in rollback mode it takes the read lock for a moment).
func (l *liveSource) dataVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := l.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: data_version: %w", l.path, err)
	}
	return v, nil
}

// image reads the whole database through SQLite (sqlite3_serialize: one
// statement, so one read transaction, reads every page through the pager,
// the WAL's committed frames included): a consistent image, never a torn
// page nor a half-applied transaction.
func (l *liveSource) image(ctx context.Context) ([]byte, error) {
	var img []byte
	err := l.conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return errors.New("unexpected SQLite driver connection type")
		}
		var err error
		img, err = c.Serialize("main")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: read the database: %w", l.path, err)
	}
	return img, nil
}
