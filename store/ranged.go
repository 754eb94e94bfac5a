package store

import (
	"context"
	"fmt"
	"io"
)

// RangeReader is a store that streams part of an object, as S3 serves a
// ranged GET: what a download needs that fetches a large object in several
// parts at once and uses each part's bytes as they arrive. It is optional;
// OpenRange falls back to ReadAt. Backends implement it, and wrappers pass
// it on (a wrapper that embeds Store hides it: implement it again).
type RangeReader interface {
	// OpenRange streams the n bytes of object key from offset off; the
	// caller closes the reader. The stream ends with io.EOF after exactly
	// n bytes; an object that ends first ends it early with an error
	// wrapping io.ErrUnexpectedEOF. A missing object is an error wrapping
	// ErrNotFound, from OpenRange or from the first Read. ctx bounds the
	// whole stream.
	OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
}

// OpenRange streams n bytes of object key of s from off: with s's own
// OpenRange when it has one, else with ReadAt, a piece of at most
// PieceSize bytes at a time (a round trip each).
func OpenRange(ctx context.Context, s Store, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("open range [%d, +%d) of %q: negative", off, n, key)
	}
	if rr, ok := s.(RangeReader); ok {
		return rr.OpenRange(ctx, key, off, n)
	}
	return &pieceReader{ctx: ctx, s: s, key: key, off: off, left: n}, nil
}

// PieceSize is the largest ReadAt the fallback of OpenRange makes.
const PieceSize = 1 << 20

// pieceReader streams a range with ReadAt, one piece at a time.
type pieceReader struct {
	ctx  context.Context
	s    Store
	key  string
	off  int64
	left int64
	buf  []byte // the piece read, not yet returned
	err  error  // what ends the stream once buf is returned (a range past the object's end)
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.left == 0 {
			return 0, io.EOF
		}
		piece := make([]byte, min(r.left, PieceSize))
		n, err := r.s.ReadAt(r.ctx, r.key, piece, r.off)
		r.buf = piece[:n]
		r.off += int64(n)
		r.left -= int64(n)
		if err != nil {
			if n == 0 {
				return 0, err
			}
			r.err = err // the bytes that exist first, then the error
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *pieceReader) Close() error { return nil }

// ExactStream returns rc ending with io.EOF after exactly n bytes, and with
// an error wrapping io.ErrUnexpectedEOF if rc ends sooner: what backends
// whose streams may end early (an object shorter than the range asked
// for) return from OpenRange. what names the stream in that error.
func ExactStream(rc io.ReadCloser, n int64, what string) io.ReadCloser {
	return &exactStream{rc: rc, left: n, want: n, what: what}
}

type exactStream struct {
	rc         io.ReadCloser
	left, want int64
	what       string
}

func (e *exactStream) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.rc.Read(p)
	e.left -= int64(n)
	switch {
	case e.left == 0:
		return n, nil // the next Read says io.EOF, whatever rc would
	case err == io.EOF:
		return n, fmt.Errorf("%s: the object ended after %d of %d bytes: %w", e.what, e.want-e.left, e.want, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (e *exactStream) Close() error { return e.rc.Close() }
