package sqlitevfs

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// FilePages serves the pages of an SQLite database file, page by page with
// pread. It implements Pages only: the kernel reads a local file ahead
// better than a second read-ahead layer would.
type FilePages struct {
	f         *os.File
	pageSize  int
	pageCount int64
}

// NewFilePages reads the page size from the database header of f and the
// page count from its size. The file must not change while in use;
// closing f is the caller's business.
func NewFilePages(f *os.File) (*FilePages, error) {
	var hdr [100]byte
	n, err := f.ReadAt(hdr[:], 0)
	switch {
	case n == 0 && err == io.EOF:
		return nil, fmt.Errorf("sqlitevfs: %s is empty, not an SQLite database", f.Name())
	case err != nil && err != io.EOF:
		return nil, fmt.Errorf("sqlitevfs: reading header of %s: %w", f.Name(), err)
	case n < len(hdr) || string(hdr[:16]) != "SQLite format 3\x00":
		// The words of sqlchunks' import, so that sql --file and import
		// say the same of the same file.
		return nil, fmt.Errorf("sqlitevfs: %s is not an SQLite database (it does not start with the header \"SQLite format 3\")", f.Name())
	}
	ps := int(binary.BigEndian.Uint16(hdr[16:18]))
	if ps == 1 {
		ps = 65536
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sqlitevfs: %w", err)
	}
	if ps < 512 || ps&(ps-1) != 0 || fi.Size()%int64(ps) != 0 {
		return nil, fmt.Errorf("%w: %s: page size %d, file size %d", ErrBadPages, f.Name(), ps, fi.Size())
	}
	return &FilePages{f: f, pageSize: ps, pageCount: fi.Size() / int64(ps)}, nil
}

// PageSize implements Pages.
func (fp *FilePages) PageSize() int { return fp.pageSize }

// PageCount implements Pages.
func (fp *FilePages) PageCount() int64 { return fp.pageCount }

// ReadPage implements Pages.
func (fp *FilePages) ReadPage(ctx context.Context, n int64, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n < 1 || n > fp.pageCount || len(p) != fp.pageSize {
		return fmt.Errorf("sqlitevfs: page %d (len %d) out of range of %s", n, len(p), fp.f.Name())
	}
	_, err := fp.f.ReadAt(p, (n-1)*int64(fp.pageSize))
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
