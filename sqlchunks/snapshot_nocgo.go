//go:build !cgo || chunkd_ext

package sqlchunks

import (
	"context"
	"errors"
)

// Without cgo there is no SQLite to take a snapshot with; in the loadable
// extension (the chunkd_ext build) the only SQLite is the host program's,
// which reads.
func snapshot(context.Context, string, string, int) error {
	return errors.New("needs the chunkd binary built with cgo (CGO_ENABLED=1 and a C compiler)")
}

// liveSource needs SQLite; see snapshot.
type liveSource struct{}

func openLive(context.Context, string) (*liveSource, error) {
	return nil, errors.New("needs the chunkd binary built with cgo (CGO_ENABLED=1 and a C compiler)")
}

func (*liveSource) Close() error                               { return nil }
func (*liveSource) dataVersion(context.Context) (int64, error) { return 0, nil }
func (*liveSource) image(context.Context) ([]byte, error)      { return nil, errors.New("no SQLite") }
