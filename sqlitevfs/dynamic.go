package sqlitevfs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
)

// An Opener opens a database that no Register put under its name, when
// SQLite opens one through the VFS: a URI filename "file:NAME?k=v&..."
// with vfs=chunkd whose name and parameters say where its pages are. (The
// loadable extension opens databases this way, for host programs that
// know nothing of Register.) params holds all the URI's parameters,
// SQLite's own (vfs, mode, ...) too.
//
// Connections that open the same name with the same parameters share one
// Image: the Opener is called for the first of them, and Image.Close when
// the last closes. The Opener runs inside SQLite's open call: it should
// bound its own time.
//
// An Opener's error does not fail SQLite's open call itself: the file
// opens, Opened reports the error, and every read of the database fails
// with SQLITE_IOERR. (SQLite would otherwise report only "unable to open
// database file"; the extension turns the error into the open's error and
// message.)
type Opener func(name string, params url.Values) (*Image, error)

// Image is a database image an Opener opened.
type Image struct {
	// Pages serves the pages.
	Pages Pages
	// Options, nil for the defaults, apply as for Register.
	Options *Options
	// Value is the opener's own, for ValueOf.
	Value any
	// Close, if not nil, releases what the opener opened; it is called
	// when the last connection to the image closes.
	Close func() error
}

var (
	openerMu sync.Mutex
	opener   Opener
	images   = map[string]*openImage{} // by name and parameters
)

// openImage is an image an Opener opened (or is opening), with the files
// SQLite has open on it.
type openImage struct {
	ready chan struct{} // closed once the opener returned
	reg   *registration // nil if the opener failed
	img   *Image
	err   error
	files int
}

// SetOpener registers the VFS with SQLite (if it is not yet) and makes fn
// the opener of the names Register did not register (nil: none, the
// default).
func SetOpener(fn Opener) error {
	if err := registerVFS(); err != nil {
		return err
	}
	openerMu.Lock()
	opener = fn
	openerMu.Unlock()
	return nil
}

// haveOpener reports whether an Opener is set.
func haveOpener() bool {
	openerMu.Lock()
	defer openerMu.Unlock()
	return opener != nil
}

// openDynamic returns the registration of the image for name and params,
// opening it with the Opener if no file has it open yet (or waiting for
// the open already under way), and the function that releases it. If the
// image cannot be opened, the registration is a failed one (failed) and
// the release does nothing.
func openDynamic(name string, params url.Values) (*registration, func()) {
	key := name + "?" + params.Encode()
	openerMu.Lock()
	fn := opener
	oi := images[key]
	first := false
	switch {
	case oi != nil:
		oi.files++
	case fn != nil:
		oi = &openImage{ready: make(chan struct{}), files: 1}
		images[key] = oi
		first = true
	}
	openerMu.Unlock()
	if oi == nil {
		return failed(name, fmt.Errorf("%w: %q", ErrNotRegistered, name)), func() {}
	}
	if first {
		oi.open(name, params, fn)
	} else {
		<-oi.ready
	}
	if oi.err != nil {
		openerMu.Lock()
		oi.files--
		if images[key] == oi {
			delete(images, key) // the next open tries again
		}
		openerMu.Unlock()
		return failed(name, oi.err), func() {}
	}
	return oi.reg, func() { oi.release(key) }
}

// open calls the opener and makes the image's registration.
func (oi *openImage) open(name string, params url.Values, fn Opener) {
	defer close(oi.ready)
	img, err := callOpener(fn, name, params)
	if err == nil {
		oi.reg, err = newRegistration(name, img.Pages, img.Options)
		if err != nil && img.Close != nil {
			img.Close()
		}
	}
	if err != nil {
		oi.err = err
		return
	}
	oi.img, oi.reg.value = img, img.Value
}

// callOpener calls fn, turning a panic or a nil image into an error.
func callOpener(fn Opener, name string, params url.Values) (img *Image, err error) {
	defer func() {
		if v := recover(); v != nil {
			img, err = nil, fmt.Errorf("sqlitevfs: opening %q: panic: %v", name, v)
		}
	}()
	img, err = fn(name, params)
	if err == nil && (img == nil || img.Pages == nil) {
		err = fmt.Errorf("sqlitevfs: opening %q: the opener returned no pages", name)
	}
	return img, err
}

// release is called when a file on the image closes; the last one closes
// the image.
func (oi *openImage) release(key string) {
	openerMu.Lock()
	oi.files--
	last := oi.files == 0
	if last && images[key] == oi {
		delete(images, key)
	}
	openerMu.Unlock()
	if !last {
		return
	}
	oi.reg.close()
	if oi.img.Close != nil {
		oi.img.Close() //nolint:errcheck // nobody to tell: SQLite closed the file already
	}
}

// failed returns the registration of a file whose image did not open:
// one page long, so that SQLite reads it rather than take it for an empty
// database, and every read of it fails with err (see dbFile.readAt).
func failed(name string, err error) *registration {
	r := &registration{name: name, err: err, pageSize: 512, pageCount: 1, ctx: context.Background()}
	r.setErr(err)
	return r
}

// errOpen is wrapped by the read errors of an image that did not open.
var errOpen = errors.New("sqlitevfs: the database did not open")

// opened returns what Opened returns for f.
func (f *dbFile) opened() (any, error) {
	if f.reg.err != nil {
		return nil, f.reg.err
	}
	return f.reg.value, nil
}

// ValueOf returns the value an Opener gave the database file SQLite has
// open under handle h (Image.Value; see chunkd_file_handle in shim.h), or
// the error the Opener failed with. A file whose value is not a V (a file
// of an image Register put under its name has none) is ok false.
func ValueOf[V any](h uintptr) (v V, ok bool, err error) {
	val, err := openedValue(h)
	if err != nil {
		return v, false, err
	}
	v, ok = val.(V)
	return v, ok, nil
}
