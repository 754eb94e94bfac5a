package sqlitevfs

import (
	"errors"
	"fmt"
)

// errShortRead reports a read past the end of a file; SQLite expects the
// rest of its buffer zeroed and SQLITE_IOERR_SHORT_READ.
var errShortRead = errors.New("sqlitevfs: short read")

// dbFile is one SQLite connection's handle on a registered image. SQLite
// serializes the calls on one handle.
type dbFile struct {
	reg     *registration
	release func() // called at close: lets go of an Opener's image
	slots   bool   // holds a reference to reg.slots, which C reads
	scratch []byte // two pages, for the partial pages at either end of a read
	scans   connScans
}

func (f *dbFile) size() int64 { return f.reg.pageCount * int64(f.reg.pageSize) }

func (f *dbFile) writeAt([]byte, int64) error { return ErrReadOnly }

func (f *dbFile) truncate(int64) error { return ErrReadOnly }

// readAt fills p from offset off of the image, reading whole pages. Past
// the end of the image it returns the count read and errShortRead.
func (f *dbFile) readAt(p []byte, off int64) (int, error) {
	r := f.reg
	if r.err != nil {
		// An image that did not open (see failed). SQLite reads the first
		// 100 bytes of a database while it opens it, before the extension
		// can report the Opener's error with its message; that read finds
		// zeros. Every other read fails.
		if off == 0 && len(p) <= 100 {
			return 0, errShortRead
		}
		return 0, fmt.Errorf("%w: %w", errOpen, r.err)
	}
	if r.gone.Load() {
		err := fmt.Errorf("%w: %q", ErrUnregistered, r.name)
		r.setErr(err)
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("sqlitevfs: negative offset %d", off)
	}
	end := min(off+int64(len(p)), f.size())
	if end <= off {
		return 0, errShortRead
	}
	n := int(end - off)
	if err := f.fill(p[:n], off); err != nil {
		r.setErr(err)
		return 0, err
	}
	if n < len(p) {
		return n, errShortRead
	}
	return n, nil
}

// fill reads p (within the image) starting at off.
func (f *dbFile) fill(p []byte, off int64) error {
	r := f.reg
	ps := int64(r.pageSize)
	first := off/ps + 1
	last := (off+int64(len(p))-1)/ps + 1

	r.pagesRead.Add(last - first + 1)

	// The common case: exactly one whole page.
	if first == last && off%ps == 0 && int64(len(p)) == ps {
		return f.readPage(first, p)
	}

	// Target buffers, one per page: the caller's memory where a page is
	// covered whole, scratch space for the partial pages at the ends.
	bufs := make([][]byte, last-first+1)
	for i := range bufs {
		pg := first + int64(i)
		start := (pg - 1) * ps // offset of this page in the image
		if start >= off && start+ps <= off+int64(len(p)) {
			bufs[i] = p[start-off : start-off+ps]
			continue
		}
		bufs[i] = f.scratchPage(pg == first)
	}
	if err := f.readPages(first, bufs); err != nil {
		return err
	}
	// Copy out the partial ends (whole pages already landed in p).
	if head := bufs[0]; off%ps != 0 || len(p) < int(ps) {
		copy(p, head[off%ps:])
	}
	if len(bufs) > 1 {
		start := (last - 1) * ps
		if tailLen := off + int64(len(p)) - start; tailLen < ps {
			copy(p[start-off:], bufs[len(bufs)-1][:tailLen])
		}
	}
	return nil
}

func (f *dbFile) scratchPage(head bool) []byte {
	ps := f.reg.pageSize
	if f.scratch == nil {
		f.scratch = make([]byte, 2*ps)
	}
	if head {
		return f.scratch[:ps]
	}
	return f.scratch[ps:]
}

// readPage reads page n into p, through the read-ahead layer if there is
// one.
func (f *dbFile) readPage(n int64, p []byte) error {
	r := f.reg
	var err error
	if ra, ok := r.pages.(*readAhead); ok {
		err = ra.readPageOn(r.ctx, n, p, &f.scans)
	} else {
		err = r.pages.ReadPage(r.ctx, n, p)
	}
	if err != nil {
		return fmt.Errorf("sqlitevfs: %s: read page %d: %w", r.name, n, err)
	}
	return nil
}

// readPages reads the pages of a read that spans several, with one
// ReadPages call if the source has it.
func (f *dbFile) readPages(first int64, bufs [][]byte) error {
	r := f.reg
	if len(bufs) == 1 {
		return f.readPage(first, bufs[0])
	}
	if r.ranger != nil {
		if err := r.ranger.ReadPages(r.ctx, first, bufs); err != nil {
			return fmt.Errorf("sqlitevfs: %s: read pages %d-%d: %w", r.name, first, first+int64(len(bufs))-1, err)
		}
		return nil
	}
	for i, b := range bufs {
		if err := f.readPage(first+int64(i), b); err != nil {
			return err
		}
	}
	return nil
}
