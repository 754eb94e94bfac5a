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

// heldImage is an optional interface of a PageImage (client.Image has
// it): Holds reports, without reading it, whether slot i is filled (a
// Read of it may still fail its check).
type heldImage interface {
	Holds(i int) bool
}

// ImageFunc opens the page image of a version whose pages are the chunks
// addrs, each slotSize bytes.
type ImageFunc func(ctx context.Context, slotSize int, addrs []addr.Addr) (PageImage, error)

// VersionImageFunc opens the page image of version root (the zero root:
// the head) as a same-host cache service registers it from the page map
// it read and proved itself, in one request: it returns the version's
// root and its root chunk, not checked (the caller checks that they hash
// to each other), and the image, whose Slots and SlotSize the caller
// checks against the root chunk.
type VersionImageFunc func(ctx context.Context, root addr.Addr) (head addr.Addr, rootChunk []byte, img ShapedImage, err error)

// ShapedImage is a PageImage that tells its shape.
type ShapedImage interface {
	PageImage
	Slots() int
	SlotSize() int
}

// Images are a same-host cache service's page images: Open opens the image
// of a list of page addresses, OpenVersion (optional) that of a version
// by its root, without the page map.
type Images struct {
	Open        ImageFunc
	OpenVersion VersionImageFunc
}

// WithImages returns a reader that reads like c and gives the versions it
// opens (OpenPages, OpenVersion) a page image from images when it can
// (OpenVersion: by the version's root, with no page map, else by its
// pages' addresses); when it cannot (no service on this host, say), pages
// are read through c as they would be.
func WithImages(c ChunkReader, images Images) ChunkReader { return imageReader{c, images} }

type imageReader struct {
	ChunkReader
	images Images
}

// ImagesOf turns the page-image openers of a reader whose image is a
// concrete type (client.Client's OpenImage and OpenVersionImage) into
// Images:
//
//	sqlchunks.WithImages(c, sqlchunks.ImagesOf(c.OpenImage, c.OpenVersionImage))
func ImagesOf[I ShapedImage](open func(ctx context.Context, slotSize int, addrs []addr.Addr) (I, error), openVersion func(ctx context.Context, root addr.Addr) (addr.Addr, []byte, I, error)) Images {
	return Images{
		Open: func(ctx context.Context, slotSize int, addrs []addr.Addr) (PageImage, error) {
			img, err := open(ctx, slotSize, addrs)
			if err != nil {
				return nil, err
			}
			return img, nil
		},
		OpenVersion: func(ctx context.Context, root addr.Addr) (addr.Addr, []byte, ShapedImage, error) {
			head, data, img, err := openVersion(ctx, root)
			if err != nil {
				return addr.Addr{}, nil, nil, err
			}
			return head, data, img, nil
		},
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
