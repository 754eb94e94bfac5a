package store

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// TailReader is a store that reads the end of an object and learns its
// size in one request, as S3 answers a GET with "Range: bytes=-N": what
// opening a table file's index needs (the index is at the end), a round
// trip less than a Head and then a ranged read. It is optional; ReadTail
// falls back to Head and ReadAt. Backends implement it, and wrappers pass
// it on (a wrapper that embeds Store hides it: implement it again).
type TailReader interface {
	// ReadTail reads the last len(p) bytes of object key into p, or the
	// whole object into p[:size] if it is shorter, and returns how many
	// bytes it read and the object's size. A missing object is an error
	// wrapping ErrNotFound.
	ReadTail(ctx context.Context, key string, p []byte) (n int, size int64, err error)
}

// ReadTail reads the last len(p) bytes of object key of s into p (the
// whole object, if it is shorter) and returns how many it read and the
// object's size: with s's own ReadTail when it has one, else with Head
// and ReadAt (two round trips).
func ReadTail(ctx context.Context, s Store, key string, p []byte) (int, int64, error) {
	if tr, ok := s.(TailReader); ok {
		return tr.ReadTail(ctx, key, p)
	}
	info, err := s.Head(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	return readTailAt(ctx, s, key, p, info.Size)
}

// readTailAt reads the end of an object of size bytes with ReadAt.
func readTailAt(ctx context.Context, s Store, key string, p []byte, size int64) (int, int64, error) {
	n := int(min(int64(len(p)), size))
	if n == 0 {
		return 0, size, nil
	}
	m, err := s.ReadAt(ctx, key, p[:n], size-int64(n))
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("read the last %d bytes of %q (%d bytes): it changed meanwhile: %w", n, key, size, err)
	}
	return m, size, err
}
