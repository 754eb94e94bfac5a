package tablefile

import (
	"bufio"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/snappy"
)

// Writer writes a classic table file: records in the order chunks are
// added, then the index and footer. It holds 24 bytes per chunk until
// Finish. Not safe for concurrent use.
type Writer struct {
	w   *bufio.Writer
	err error

	prefixes     []uint64
	lengths      []uint32
	suffixes     []byte
	uncompressed uint64
	seen         map[addr.Addr]struct{}
	buf          []byte
	finished     bool
}

// NewWriter returns a Writer that writes a table file to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 1<<20), seen: make(map[addr.Addr]struct{})}
}

// ErrEmptyChunk is returned by Add for a zero-length chunk, which table
// files cannot hold.
var ErrEmptyChunk = errors.New("empty chunk")

// Add compresses data and appends it as a record, returning its address.
// Adding a chunk the writer already holds is a no-op.
func (w *Writer) Add(data []byte) (addr.Addr, error) {
	a := addr.Of(data)
	if err := w.AddWithAddr(a, data); err != nil {
		return a, err
	}
	return a, nil
}

// AddWithAddr is Add for a caller that already knows (and has checked)
// the chunk's address, to avoid hashing twice.
func (w *Writer) AddWithAddr(a addr.Addr, data []byte) error {
	if len(data) == 0 {
		return ErrEmptyChunk
	}
	if _, dup := w.seen[a]; dup {
		return nil
	}
	need := snappy.MaxEncodedLen(len(data)) + crcSize
	if cap(w.buf) < need {
		w.buf = make([]byte, need)
	}
	body := snappy.Encode(w.buf[:cap(w.buf)], data)
	rec := binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	return w.addRecord(a, rec, uint64(len(data)))
}

// AddRecord appends an already encoded record (snappy block followed by
// its big-endian CRC-32C), as read from another table file, without
// recompressing it. The caller vouches that it decodes to a chunk of
// uncompressedLen bytes with address a.
func (w *Writer) AddRecord(a addr.Addr, record []byte, uncompressedLen uint64) error {
	if len(record) <= crcSize {
		return fmt.Errorf("add record %s: %d bytes is too short", a, len(record))
	}
	if _, dup := w.seen[a]; dup {
		return nil
	}
	return w.addRecord(a, record, uncompressedLen)
}

func (w *Writer) addRecord(a addr.Addr, rec []byte, uncompressedLen uint64) error {
	if w.finished {
		return errors.New("table writer: add after Finish")
	}
	if w.err != nil {
		return w.err
	}
	if len(rec) > maxChunkLen {
		return fmt.Errorf("add chunk %s: record of %d bytes exceeds %d", a, len(rec), maxChunkLen)
	}
	if len(w.lengths) == 1<<32-1 {
		return errors.New("table writer: too many chunks")
	}
	if _, err := w.w.Write(rec); err != nil {
		w.err = fmt.Errorf("write record: %w", err)
		return w.err
	}
	w.seen[a] = struct{}{}
	w.prefixes = append(w.prefixes, a.Prefix())
	w.lengths = append(w.lengths, uint32(len(rec)))
	w.suffixes = append(w.suffixes, a.Suffix()...)
	w.uncompressed += uncompressedLen
	return nil
}

// Has reports whether the writer already holds address a.
func (w *Writer) Has(a addr.Addr) bool { _, ok := w.seen[a]; return ok }

// Count returns the number of chunks added so far.
func (w *Writer) Count() int { return len(w.lengths) }

// Finish writes the index and footer, flushes, and returns the file's
// name (base32 of the SHA-512 of the suffix section). The underlying
// writer is not closed.
func (w *Writer) Finish() (string, error) {
	if w.err != nil {
		return "", w.err
	}
	if w.finished {
		return "", errors.New("table writer: Finish called twice")
	}
	w.finished = true
	n := len(w.lengths)
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i)
	}
	sort.Slice(order, func(i, j int) bool {
		pi, pj := w.prefixes[order[i]], w.prefixes[order[j]]
		return pi < pj || pi == pj && order[i] < order[j]
	})
	var b []byte
	for _, ord := range order {
		b = binary.BigEndian.AppendUint64(b, w.prefixes[ord])
		b = binary.BigEndian.AppendUint32(b, ord)
	}
	for _, l := range w.lengths {
		b = binary.BigEndian.AppendUint32(b, l)
	}
	b = append(b, w.suffixes...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint64(b, w.uncompressed)
	b = append(b, magic...)
	if _, err := w.w.Write(b); err != nil {
		return "", fmt.Errorf("write index: %w", err)
	}
	if err := w.w.Flush(); err != nil {
		return "", fmt.Errorf("write table file: %w", err)
	}
	sum := sha512.Sum512(w.suffixes)
	return addr.Addr(sum[:addr.Size]).String(), nil
}
