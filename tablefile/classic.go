package tablefile

import (
	"bytes"
	"crypto/sha512"
	"hash/crc32"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/snappy"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// classicIndex holds a classic file's index in 32 bytes per chunk: the
// sorted prefixes and their ordinals, and per ordinal (file order) the
// record offset and the address suffix. Record lengths are differences of
// consecutive offsets.
type classicIndex struct {
	prefixes
	ordinals []uint32 // by sorted position
	offsets  []uint64 // by ordinal, len n+1; offsets[n] = end of data
	suffixes []byte   // by ordinal, 12 bytes each, exactly as stored
}

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
	return nil
}

func parseClassicIndex(raw []byte, n int, indexOff int64) (*classicIndex, error) {
	tuples := raw[:n*tupleSize]
	lengths := raw[n*tupleSize : n*(tupleSize+lengthSize)]
	suffixes := raw[n*(tupleSize+lengthSize):]
	idx := &classicIndex{
		ordinals: make([]uint32, n),
		offsets:  make([]uint64, n+1),
		suffixes: append([]byte(nil), suffixes...),
	}
	p := make([]uint64, n)
	for i := 0; i < n; i++ {
		p[i] = be64(tuples[i*tupleSize:])
		ord := be32(tuples[i*tupleSize+prefixSize:])
		if int64(ord) >= int64(n) {
			return nil, corruptf(indexOff+int64(i*tupleSize), "", "index tuple %d has ordinal %d, but the file has %d chunks", i, ord, n)
		}
		idx.ordinals[i] = ord
	}
	if !sortedUint64(p) {
		return nil, corruptf(indexOff, "", "index prefixes are not sorted")
	}
	var off uint64
	for k := 0; k < n; k++ {
		l := be32(lengths[k*lengthSize:])
		if l <= crcSize || l > maxChunkLen {
			return nil, corruptf(indexOff+int64(n*tupleSize+k*lengthSize), "", "record %d has length %d", k, l)
		}
		idx.offsets[k] = off
		off += uint64(l)
	}
	idx.offsets[n] = off
	if off != uint64(indexOff) {
		return nil, corruptf(indexOff, "", "records add up to %d bytes, but the index starts at %d", off, indexOff)
	}
	idx.prefixes = newPrefixes(p)
	return idx, nil
}

func (x *classicIndex) count() int     { return len(x.ordinals) }
func (x *classicIndex) dataEnd() int64 { return int64(x.offsets[len(x.offsets)-1]) }
func (x *classicIndex) memSize() int {
	return x.prefixes.memSize() + 4*len(x.ordinals) + 8*len(x.offsets) + len(x.suffixes)
}
func (x *classicIndex) span(uint32) (uint64, uint32, bool) { return 0, 0, false }

func (x *classicIndex) lookup(a addr.Addr) (Entry, bool) {
	p := a.Prefix()
	i := x.first(p)
	if i < 0 {
		return Entry{}, false
	}
	for ; i < len(x.p) && x.p[i] == p; i++ {
		ord := x.ordinals[i]
		if bytes.Equal(x.suffixes[int(ord)*suffixSize:int(ord+1)*suffixSize], a[prefixSize:]) {
			return x.byOrdinal(ord, a), true
		}
	}
	return Entry{}, false
}

func (x *classicIndex) byOrdinal(ord uint32, a addr.Addr) Entry {
	off := x.offsets[ord]
	return Entry{Addr: a, Offset: off, Length: uint32(x.offsets[ord+1] - off)}
}

func (x *classicIndex) each(fn func(Entry)) {
	for i, ord := range x.ordinals {
		var a addr.Addr
		v := x.p[i]
		for b := 0; b < prefixSize; b++ {
			a[b] = byte(v >> (56 - 8*b))
		}
		copy(a[prefixSize:], x.suffixes[int(ord)*suffixSize:])
		fn(x.byOrdinal(ord, a))
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
		sum := sha512.Sum512(x.suffixes)
		t.name = addr.Addr(sum[:addr.Size]).String()
	})
	return t.name
}

// decodeRecord checks a snappy record's CRC and decodes it.
func decodeRecord(e Entry, rec []byte) ([]byte, error) {
	if len(rec) <= crcSize {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "record of %d bytes is too short", len(rec))
	}
	body := rec[:len(rec)-crcSize]
	want := be32(rec[len(rec)-crcSize:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "CRC-32C is %08x, record says %08x", got, want)
	}
	n, err := snappy.DecodedLen(body)
	if err != nil || n > maxChunkLen {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "bad snappy header: %v", err)
	}
	out, err := snappy.Decode(make([]byte, n), body)
	if err != nil {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "snappy: %v", err)
	}
	return out, nil
}
