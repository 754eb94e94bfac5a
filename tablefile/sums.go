package tablefile

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Sums are what a verifier records about a table file it has checked
// whole (every chunk hashed to its address), so that a copy of the same
// file can later be trusted chunk by chunk at the cost of a CRC instead of
// a SHA-512:
//
//   - Index is the SHA-256 of the index region (index, archive metadata
//     and footer: every byte from DataEnd to the end of the file). A copy
//     opened with these sums must hash to it, so its index, and every
//     offset and length read from it, is the verified one.
//   - Spans holds, for archives, a CRC-32C of each byte span (dictionaries
//     and chunk data), which the format itself does not carry. Classic
//     records carry their own CRC-32C, so Spans is nil for them.
//
// A Table opened with Options.Sums (or made with View) checks the index
// region when it opens, every archive span it reads against its CRC, and
// every classic record against its own: a byte that changed since the
// file was verified is an ErrCorrupt, never a wrong chunk.
//
// Encoded (MarshalBinary), big-endian:
//
//	magic "chunkd-sums\x00" ‖ version u8 ‖ file size u64 ‖ data end u64 ‖
//	index SHA-256 [32] ‖ span count u32 ‖ span count × CRC-32C u32 ‖
//	CRC-32C of everything before it u32
type Sums struct {
	Size    int64
	DataEnd int64
	Index   [sha256.Size]byte
	Spans   []uint32
}

const (
	sumsMagic   = "chunkd-sums\x00"
	sumsVersion = 1
	sumsHeader  = len(sumsMagic) + 1 + 8 + 8 + sha256.Size + 4
)

// MarshalBinary encodes s.
func (s *Sums) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, sumsHeader+4*len(s.Spans)+4)
	b = append(b, sumsMagic...)
	b = append(b, sumsVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(s.Size))
	b = binary.BigEndian.AppendUint64(b, uint64(s.DataEnd))
	b = append(b, s.Index[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Spans)))
	for _, c := range s.Spans {
		b = binary.BigEndian.AppendUint32(b, c)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// ErrBadSums: encoded sums that are damaged or of another version.
var ErrBadSums = errors.New("bad table-file sums")

// UnmarshalBinary decodes sums written by MarshalBinary, checking their
// own checksum.
func (s *Sums) UnmarshalBinary(b []byte) error {
	if len(b) < sumsHeader+4 || string(b[:len(sumsMagic)]) != sumsMagic {
		return fmt.Errorf("%w: %d bytes without the sums magic", ErrBadSums, len(b))
	}
	body, sum := b[:len(b)-4], be32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fmt.Errorf("%w: CRC-32C is %08x, they say %08x", ErrBadSums, got, sum)
	}
	p := len(sumsMagic)
	if v := b[p]; v != sumsVersion {
		return fmt.Errorf("%w: version %d, this reader knows %d", ErrBadSums, v, sumsVersion)
	}
	p++
	s.Size = int64(be64(b[p:]))
	s.DataEnd = int64(be64(b[p+8:]))
	p += 16
	copy(s.Index[:], b[p:])
	p += sha256.Size
	n := int(be32(b[p:]))
	p += 4
	if len(body)-p != 4*n {
		return fmt.Errorf("%w: %d span CRCs in %d bytes", ErrBadSums, n, len(body)-p)
	}
	s.Spans = nil
	if n > 0 {
		s.Spans = make([]uint32, n)
		for i := range s.Spans {
			s.Spans[i] = be32(b[p+4*i:])
		}
	}
	return nil
}

// ComputeSums reads the file's index region and, for an archive, every
// byte span, and returns their sums. Call it on a file Verify passed:
// sums vouch for the bytes as they are now.
func (t *Table) ComputeSums() (*Sums, error) {
	s := &Sums{Size: t.size, DataEnd: t.idx.dataEnd()}
	region := make([]byte, t.size-s.DataEnd)
	if err := readFull(t.r, region, s.DataEnd); err != nil {
		return nil, fmt.Errorf("sums of the index: %w", err)
	}
	s.Index = sha256.Sum256(region)
	if x, ok := t.idx.(*archiveIndex); ok {
		s.Spans = make([]uint32, len(x.ends))
		var buf []byte
		for i := range x.ends {
			off, n, _ := x.span(uint32(i + 1))
			if cap(buf) < int(n) {
				buf = make([]byte, n)
			}
			if err := readFull(t.r, buf[:n], int64(off)); err != nil {
				return nil, fmt.Errorf("sums of span %d: %w", i+1, err)
			}
			s.Spans[i] = crc32.Checksum(buf[:n], castagnoli)
		}
	}
	return s, nil
}

// IndexHash returns the SHA-256 of the index region, if Open computed it
// (Options.IndexHash or Options.Sums).
func (t *Table) IndexHash() ([sha256.Size]byte, bool) { return t.indexHash, t.hashedIndex }

// setIndexHash records the SHA-256 of the index region, given in pieces.
func (t *Table) setIndexHash(pieces ...[]byte) {
	h := sha256.New()
	for _, p := range pieces {
		h.Write(p)
	}
	h.Sum(t.indexHash[:0])
	t.hashedIndex = true
}

// matchSums reports whether s describes this table's file.
func (t *Table) matchSums(s *Sums) error {
	if s.Size != t.size || s.DataEnd != t.idx.dataEnd() {
		return corruptf(t.idx.dataEnd(), "", "file is %d bytes with data ending at %d; its sums are for %d and %d", t.size, t.idx.dataEnd(), s.Size, s.DataEnd)
	}
	if !t.hashedIndex || t.indexHash != s.Index {
		return corruptf(t.idx.dataEnd(), "", "index region hashes to %x, not to the verified copy's %x", t.indexHash[:8], s.Index[:8])
	}
	if x, ok := t.idx.(*archiveIndex); ok && len(s.Spans) != len(x.ends) {
		return corruptf(t.idx.dataEnd(), "", "archive has %d byte spans, its sums %d", len(x.ends), len(s.Spans))
	}
	return nil
}

// checkSpan checks the stored bytes of archive span id (1-based) against
// the sums, when the table has them.
func (t *Table) checkSpan(id uint32, off uint64, stored []byte, a string) error {
	if t.sums == nil || t.sums.Spans == nil || id == 0 {
		return nil
	}
	if int(id) > len(t.sums.Spans) {
		return corruptf(int64(off), a, "byte span %d is not among the %d the sums cover", id, len(t.sums.Spans))
	}
	if got, want := crc32.Checksum(stored, castagnoli), t.sums.Spans[id-1]; got != want {
		return corruptf(int64(off), a, "byte span %d has CRC-32C %08x; when verified it had %08x", id, got, want)
	}
	return nil
}

// View returns a Table that shares t's index and bloom filter but reads
// records (and archive dictionaries) from r, a copy of the same file, with
// dictionaries of its own. With sums, which must describe t's index (t
// opened with Options.IndexHash or Options.Sums), every read through the
// view is checked against them.
func (t *Table) View(r io.ReaderAt, sums *Sums) (*Table, error) {
	if sums != nil {
		if err := t.matchSums(sums); err != nil {
			return nil, err
		}
	}
	v := &Table{
		r: r, size: t.size, format: t.format, idx: t.idx, bloom: t.bloom,
		uncompressed: t.uncompressed, meta: t.meta, sums: sums,
		indexHash: t.indexHash, hashedIndex: t.hashedIndex,
	}
	if t.arch != nil {
		v.arch = newArchive(t.arch.ids())
	}
	return v, nil
}
