package sqlchunks

import (
	"context"
	"errors"

	"github.com/chunkd/chunkd/addr"
)

// PageImage is a version's pages read from a same-host cache service's
// page image (client.Image is one): a page read from it costs a pread and
// a CRC, no request. The service fills it in the background; a page it
// does not hold yet is read through the ChunkReader (which, on the same
// host, reads the service's cached table files directly).
type PageImage interface {
	// Read copies slot i (page i+1) into p if the image holds it, checked,
	// and reports whether it did.
	Read(i int, p []byte) bool
	// Close releases the image's files.
	Close() error
}

// rangeImage is an optional interface of a PageImage (client.Image has
// it) that reads a run of slots at once, one system call for a read-ahead
// batch: ReadRange reads slots first, first+1, ... into ps and returns how
// many leading slots it read, as Read would have, one by one.
type rangeImage interface {
	ReadRange(first int, ps [][]byte) int
}

// ImageFunc opens the page image of a version whose pages are the chunks
// addrs, each slotSize bytes.
type ImageFunc func(ctx context.Context, slotSize int, addrs []addr.Addr) (PageImage, error)

// WithImages returns a reader that reads like c and gives the versions it
// opens (OpenPages, OpenVersion) a page image from open when open
// succeeds; when it fails (no service on this host, say), pages are read
// through c as they would be.
func WithImages(c ChunkReader, open ImageFunc) ChunkReader { return imageReader{c, open} }

type imageReader struct {
	ChunkReader
	open ImageFunc
}

// ImagesOf turns a page-image opener whose image is a concrete type
// (client.Client.OpenImage) into an ImageFunc:
//
//	sqlchunks.WithImages(c, sqlchunks.ImagesOf(c.OpenImage))
func ImagesOf[I PageImage](open func(ctx context.Context, slotSize int, addrs []addr.Addr) (I, error)) ImageFunc {
	return func(ctx context.Context, slotSize int, addrs []addr.Addr) (PageImage, error) {
		img, err := open(ctx, slotSize, addrs)
		if err != nil {
			return nil, err
		}
		return img, nil
	}
}

// ReadOpenSet passes on the inner reader's open set, if it has one.
func (ir imageReader) ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error) {
	if sr, ok := ir.ChunkReader.(SetReader); ok {
		return sr.ReadOpenSet(ctx, root, pages)
	}
	return addr.Addr{}, nil, errNoSet
}

var errNoSet = errors.New("sqlchunks: the reader has no open sets")
