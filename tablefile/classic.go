package tablefile

import (
	"crypto/sha512"
	"encoding/binary"
	"hash/crc32"
	"sort"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/snappy"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// classicIndex holds a classic file's index as one array of 32-byte
// slots sorted by prefix, each with everything a lookup needs, so a lookup
// touches the radix table and one or two cache lines of slots.
type classicIndex struct {
	radix
	slots []slot
	end   int64 // end of the records, where the index starts
}

type slot struct {
	prefix uint64
	suffix [suffixSize]byte
	length uint32
	offset uint64
}

func (s *slot) addr() addr.Addr {
	var a addr.Addr
	binary.BigEndian.PutUint64(a[:prefixSize], s.prefix)
	copy(a[prefixSize:], s.suffix[:])
	return a
}

func (s *slot) entry() Entry { return Entry{Addr: s.addr(), Offset: s.offset, Length: s.length} }

func (t *Table) openClassic(tail []byte) error {
	t.format = FormatClassic
	foot := tail[len(tail)-footerSize:]
	n := int64(be32(foot[footerCountOff:]))
	t.uncompressed = be64(foot[footerUncompressOff:])
	indexSize := n * perChunkIndex
	if indexSize+footerSize > t.size {
		return notTablef("footer claims %d chunks, needing a %d-byte index, but the file is %d bytes (truncated?)", n, indexSize, t.size)
	}
	indexOff := t.size - footerSize - indexSize
	raw, err := t.readTailOrAt(tail, indexOff, indexSize)
	if err != nil {
		return notTablef("read index: %v", err)
	}
	idx, err := parseClassicIndex(raw, int(n), indexOff)
	if err != nil {
		return err
	}
	t.idx = idx
	if t.hashIndex {
		t.setIndexHash(raw, foot)
	}
	return nil
}

func parseClassicIndex(raw []byte, n int, indexOff int64) (*classicIndex, error) {
	tuples := raw[:n*tupleSize]
	lengths := raw[n*tupleSize : n*(tupleSize+lengthSize)]
	suffixes := raw[n*(tupleSize+lengthSize):]
	// Record offsets by ordinal are prefix sums of the lengths.
	offsets := make([]uint64, n)
	var off uint64
	for k := 0; k < n; k++ {
		l := be32(lengths[k*lengthSize:])
		if l <= crcSize || l > maxChunkLen {
			return nil, corruptf(indexOff+int64(n*tupleSize+k*lengthSize), "", "record %d has length %d", k, l)
		}
		offsets[k] = off
		off += uint64(l)
	}
	if off > uint64(indexOff) {
		return nil, corruptf(indexOff, "", "records add up to %d bytes, but the index starts at %d: %d bytes of records are missing (truncated?)", off, indexOff, off-uint64(indexOff))
	}
	if off != uint64(indexOff) {
		return nil, corruptf(indexOff, "", "records add up to %d bytes, but the index starts at %d", off, indexOff)
	}
	idx := &classicIndex{slots: make([]slot, n), end: indexOff}
	var prev uint64
	for i := range idx.slots {
		s := &idx.slots[i]
		s.prefix = be64(tuples[i*tupleSize:])
		ord := be32(tuples[i*tupleSize+prefixSize:])
		if int64(ord) >= int64(n) {
			return nil, corruptf(indexOff+int64(i*tupleSize), "", "index tuple %d has ordinal %d, but the file has %d chunks", i, ord, n)
		}
		if s.prefix < prev {
			return nil, corruptf(indexOff+int64(i*tupleSize), "", "index prefixes are not sorted at tuple %d", i)
		}
		prev = s.prefix
		copy(s.suffix[:], suffixes[int(ord)*suffixSize:])
		s.length = be32(lengths[int(ord)*lengthSize:])
		s.offset = offsets[ord]
	}
	idx.radix = newRadix(n, func(i int) uint64 { return idx.slots[i].prefix })
	return idx, nil
}

func (x *classicIndex) count() int                         { return len(x.slots) }
func (x *classicIndex) dataEnd() int64                     { return x.end }
func (x *classicIndex) memSize() int                       { return x.radix.memSize() + 32*len(x.slots) }
func (x *classicIndex) span(uint32) (uint64, uint32, bool) { return 0, 0, false }

func (x *classicIndex) lookup(a addr.Addr) (Entry, bool) {
	p := a.Prefix()
	lo, hi := x.bounds(p)
	if hi-lo > 16 { // many equal prefixes: only in hand-made files
		lo += sort.Search(hi-lo, func(k int) bool { return x.slots[lo+k].prefix >= p })
	} else {
		for lo < hi && x.slots[lo].prefix < p {
			lo++
		}
	}
	for i := lo; i < len(x.slots) && x.slots[i].prefix == p; i++ {
		if s := &x.slots[i]; [suffixSize]byte(a[prefixSize:]) == s.suffix {
			return Entry{Addr: a, Offset: s.offset, Length: s.length}, true
		}
	}
	return Entry{}, false
}

func (x *classicIndex) each(fn func(Entry)) {
	for i := range x.slots {
		fn(x.slots[i].entry())
	}
}

// Name returns the file name Dolt gives this table file: base32 of the
// SHA-512 of its suffix section. Archives have no name derivable from
// their index (Dolt changed the rule twice), so Name returns "" for them.
func (t *Table) Name() string {
	x, ok := t.idx.(*classicIndex)
	if !ok {
		return ""
	}
	t.nameOnce.Do(func() {
		// The suffix section is in file order, which is offset order.
		order := make([]*slot, len(x.slots))
		for i := range x.slots {
			order[i] = &x.slots[i]
		}
		sort.Slice(order, func(i, j int) bool { return order[i].offset < order[j].offset })
		h := sha512.New()
		for _, s := range order {
			h.Write(s.suffix[:])
		}
		t.name = addr.Addr(h.Sum(nil)[:addr.Size]).String()
	})
	return t.name
}

// checkRecordCRC checks a snappy record's CRC-32C.
func checkRecordCRC(e Entry, rec []byte) error {
	if len(rec) <= crcSize {
		return corruptf(int64(e.Offset), e.Addr.String(), "record of %d bytes is too short", len(rec))
	}
	body := rec[:len(rec)-crcSize]
	want := be32(rec[len(rec)-crcSize:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return corruptf(int64(e.Offset), e.Addr.String(), "CRC-32C is %08x, record says %08x", got, want)
	}
	return nil
}

// decodeRecord checks a snappy record's CRC and decodes it.
// snappyMaxExpansion bounds decoded/encoded for a snappy block.
const snappyMaxExpansion = 22

func decodeRecord(e Entry, rec, buf []byte) ([]byte, error) {
	if err := checkRecordCRC(e, rec); err != nil {
		return nil, err
	}
	body := rec[:len(rec)-crcSize]
	n, err := snappy.DecodedLen(body)
	if err != nil || n > maxChunkLen {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "bad snappy header: %v", err)
	}
	// A snappy op yields at most 64 bytes from 3, so a block decodes to
	// less than 22 times its size: a header claiming more is corrupt, and
	// is refused before the buffer is allocated.
	if n > snappyMaxExpansion*len(body) {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "snappy header claims %d bytes, more than a %d-byte block can hold", n, len(body))
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	out, err := snappy.Decode(buf[:n], body)
	if err != nil {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "snappy: %v", err)
	}
	return out, nil
}
