package tablefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/chunkd/chunkd/addr"
	"github.com/klauspost/compress/zstd"
)

// Dolt archive (.darc) reader. Layout, big-endian except inside zstd:
//
//	spans    S byte spans, back to back from offset 0: dictionaries (zstd
//	         frames holding a zstd dictionary) and chunk data (zstd frames
//	         made with one of those dictionaries, or classic snappy+CRC
//	         records)
//	index    S × u64 span end offset          (span k = [end[k-1], end[k]))
//	         M × u64 address prefix           sorted ascending
//	         M × {u32 dict span, u32 data span}  same order as the prefixes
//	         M × [12]byte address suffix      same order
//	metadata JSON
//	footer   index length (u64 in v3, u32 in v1/v2) ‖ S u32 ‖ M u32 ‖
//	         metadata length u32 ‖ 3×64 checksum bytes (ignored) ‖
//	         version u8 ‖ "DOLTARC"
//
// Span ids are 1-based; dictionary span 0 means "snappy record" and is
// allowed from version 2 on.
const (
	archiveSpanEndSize  = 8
	archiveRefSize      = 8                                        // dict span u32 + data span u32
	archivePerChunk     = prefixSize + archiveRefSize + suffixSize // 28
	archiveSpanCountOff = 212                                      // from the end, all versions
	archiveChunkCntOff  = 208
	archiveMetaLenOff   = 204

	// zstdMaxBlock is the most one zstd block can hold or produce.
	zstdMaxBlock = 128 << 10
	// zdictMagic starts a dictionary in the zstd dictionary format.
	zdictMagic = "\x37\xa4\x30\xec"
)

// archiveIndex holds an archive's index. Per chunk, in prefix order: the
// prefix (8 B, plus about 1 B of radix table), the suffix (12 B), the data
// span id (4 B) and the dictionary as a 1-byte index into a small table of
// distinct dictionary span ids (4 B when an archive uses more than 256
// dictionaries); per span, its end offset (8 B). With one data span per
// chunk that is about 34 B per chunk.
type archiveIndex struct {
	prefixes
	suffixes []byte   // 12 bytes per chunk
	data     []uint32 // data span id per chunk
	dicts    dictRefs
	ends     []uint64 // ends[k] = end offset of span k+1
}

// dictRefs maps chunk positions to dictionary span ids.
type dictRefs struct {
	ids   []uint32 // distinct dictionary span ids, ascending
	small []uint8  // per chunk: index into ids (when len(ids) <= 256)
	large []uint32 // per chunk: the span id (otherwise)
}

func (d *dictRefs) at(i int) uint32 {
	if d.large != nil {
		return d.large[i]
	}
	return d.ids[d.small[i]]
}

func (d *dictRefs) memSize() int { return 4*len(d.ids) + len(d.small) + 4*len(d.large) }

// newDictRefs takes ownership of per (the dictionary span id of each chunk).
func newDictRefs(per []uint32) dictRefs {
	var ids []uint32 // sorted; a handful in practice
	for i, id := range per {
		if i > 0 && id == per[i-1] {
			continue
		}
		j, found := slices.BinarySearch(ids, id)
		if found {
			continue
		}
		if len(ids) == 256 {
			all := slices.Clone(per)
			slices.Sort(all)
			return dictRefs{ids: slices.Clip(slices.Compact(all)), large: per}
		}
		ids = slices.Insert(ids, j, id)
	}
	small := make([]uint8, len(per))
	for i, id := range per {
		j, _ := slices.BinarySearch(ids, id)
		small[i] = uint8(j)
	}
	return dictRefs{ids: ids, small: small}
}

type archiveFooter struct {
	version  byte
	size     int64 // footer bytes: 216 or 220
	indexLen uint64
	spans    uint32
	chunks   uint32
	metaLen  uint32
}

func parseArchiveFooter(tail []byte, fileSize int64) (archiveFooter, error) {
	var f archiveFooter
	f.version = tail[len(tail)-archiveVersionOff]
	switch f.version {
	case 1, 2:
		f.size = archiveFooterV1
	case 3:
		f.size = archiveFooterV3
	default:
		return f, notTablef("archive format version %d is not one this reader knows (1 to 3)", f.version)
	}
	if fileSize < f.size || int64(len(tail)) < f.size {
		return f, notTablef("file is %d bytes, shorter than a version %d archive footer (%d)", fileSize, f.version, f.size)
	}
	foot := tail[len(tail)-int(f.size):]
	if f.version == 3 {
		f.indexLen = be64(foot)
	} else {
		f.indexLen = uint64(be32(foot))
	}
	end := len(tail)
	f.spans = be32(tail[end-archiveSpanCountOff:])
	f.chunks = be32(tail[end-archiveChunkCntOff:])
	f.metaLen = be32(tail[end-archiveMetaLenOff:])
	return f, nil
}

func (t *Table) openArchive(tail []byte) error {
	f, err := parseArchiveFooter(tail, t.size)
	if err != nil {
		return err
	}
	t.format = FormatArchiveV1 + Format(f.version-1)
	footOff := t.size - f.size
	want := archiveSpanEndSize*uint64(f.spans) + archivePerChunk*uint64(f.chunks)
	if f.indexLen != want {
		return corruptf(footOff, "", "archive footer says the index is %d bytes, but %d spans and %d chunks take %d", f.indexLen, f.spans, f.chunks, want)
	}
	// Both terms are below 2^39, so the sum cannot overflow.
	if f.indexLen+uint64(f.metaLen) > uint64(footOff) {
		return notTablef("archive footer claims %d spans and %d chunks (a %d-byte index) and %d bytes of metadata, but the file is %d bytes (truncated?)", f.spans, f.chunks, f.indexLen, f.metaLen, t.size)
	}
	indexOff := footOff - int64(f.metaLen) - int64(f.indexLen)
	raw, err := t.readTailOrAt(tail, indexOff, int64(f.indexLen)+int64(f.metaLen))
	if err != nil {
		return fmt.Errorf("read archive index: %w", err)
	}
	idx, err := parseArchiveIndex(raw[:f.indexLen], f, indexOff)
	if err != nil {
		return err
	}
	if f.metaLen > 0 {
		t.meta = append([]byte(nil), raw[f.indexLen:]...)
	}
	if t.hashIndex {
		t.setIndexHash(raw, tail[len(tail)-int(f.size):])
	}
	t.idx = idx
	t.arch = newArchive(idx.dicts.ids)
	return nil
}

func parseArchiveIndex(raw []byte, f archiveFooter, indexOff int64) (*archiveIndex, error) {
	s, m := int(f.spans), int(f.chunks)
	spanSec := raw[:s*archiveSpanEndSize]
	prefixOff := len(spanSec)
	refOff := prefixOff + m*prefixSize
	suffixOff := refOff + m*archiveRefSize

	x := &archiveIndex{ends: make([]uint64, s)}
	var prev uint64
	for k := range x.ends {
		end := be64(spanSec[k*archiveSpanEndSize:])
		if end <= prev {
			return nil, corruptf(indexOff+int64(k*archiveSpanEndSize), "", "byte span %d ends at %d, not after the previous span's end %d", k+1, end, prev)
		}
		if end-prev > maxChunkLen {
			return nil, corruptf(indexOff+int64(k*archiveSpanEndSize), "", "byte span %d is %d bytes long", k+1, end-prev)
		}
		x.ends[k] = end
		prev = end
	}
	if prev > uint64(indexOff) {
		return nil, corruptf(indexOff, "", "byte spans end at %d, but the index starts at %d: %d bytes of data are missing (truncated?)", prev, indexOff, prev-uint64(indexOff))
	}
	if prev != uint64(indexOff) {
		return nil, corruptf(indexOff, "", "byte spans end at %d, but the index starts at %d", prev, indexOff)
	}

	p := make([]uint64, m)
	for i := range p {
		p[i] = be64(raw[prefixOff+i*prefixSize:])
		if i > 0 && p[i] < p[i-1] {
			return nil, corruptf(indexOff+int64(prefixOff+i*prefixSize), "", "archive prefixes are not sorted (entry %d)", i)
		}
	}

	x.data = make([]uint32, m)
	dict := make([]uint32, m)
	for i := 0; i < m; i++ {
		ref := raw[refOff+i*archiveRefSize:]
		d, sp := be32(ref), be32(ref[4:])
		bad := ""
		switch {
		case sp == 0 || int64(sp) > int64(s):
			bad = "data span out of range"
		case int64(d) > int64(s):
			bad = "dictionary span out of range"
		case d == 0 && f.version < 2:
			bad = "dictionary span 0 (snappy) is not allowed before version 2"
		case d == sp:
			bad = "data span is its own dictionary"
		}
		if bad != "" {
			return nil, corruptf(indexOff+int64(refOff+i*archiveRefSize), "", "chunk %d names dictionary span %d and data span %d (of %d): %s", i, d, sp, s, bad)
		}
		dict[i], x.data[i] = d, sp
	}
	x.suffixes = append([]byte(nil), raw[suffixOff:suffixOff+m*suffixSize]...)
	x.dicts = newDictRefs(dict)
	x.prefixes = newPrefixes(p)
	return x, nil
}

func (x *archiveIndex) count() int { return len(x.p) }

func (x *archiveIndex) dataEnd() int64 {
	if len(x.ends) == 0 {
		return 0
	}
	return int64(x.ends[len(x.ends)-1])
}

func (x *archiveIndex) memSize() int {
	return x.prefixes.memSize() + len(x.suffixes) + 4*len(x.data) + x.dicts.memSize() + 8*len(x.ends)
}

func (x *archiveIndex) span(id uint32) (uint64, uint32, bool) {
	if id == 0 || uint64(id) > uint64(len(x.ends)) {
		return 0, 0, false
	}
	var start uint64
	if id > 1 {
		start = x.ends[id-2]
	}
	return start, uint32(x.ends[id-1] - start), true
}

func (x *archiveIndex) entry(i int, a addr.Addr) Entry {
	off, n, _ := x.span(x.data[i])
	return Entry{Addr: a, Offset: off, Length: n, Dict: x.dicts.at(i), Span: x.data[i]}
}

func (x *archiveIndex) lookup(a addr.Addr) (Entry, bool) {
	p := a.Prefix()
	i := x.first(p)
	if i < 0 {
		return Entry{}, false
	}
	for ; i < len(x.p) && x.p[i] == p; i++ {
		if string(x.suffixes[i*suffixSize:(i+1)*suffixSize]) == string(a[prefixSize:]) {
			return x.entry(i, a), true
		}
	}
	return Entry{}, false
}

func (x *archiveIndex) each(fn func(Entry)) {
	for i, v := range x.p {
		var a addr.Addr
		binary.BigEndian.PutUint64(a[:prefixSize], v)
		copy(a[prefixSize:], x.suffixes[i*suffixSize:])
		fn(x.entry(i, a))
	}
}

// archive holds the decoders of an archive's dictionaries, each loaded on
// first use.
type archive struct {
	dicts []dictSlot // one per dictionary span id chunks use, ascending id
}

type dictSlot struct {
	id  uint32
	dec atomic.Pointer[dictDecoder] // set once loaded
	mu  sync.Mutex                  // serializes loading
	err error                       // a corrupt dictionary, remembered
}

// dictDecoder decodes the chunks made with one dictionary.
type dictDecoder struct {
	dec *zstd.Decoder
	// frameDict is the dictionary id the chunks' frame headers must carry:
	// the one in a dictionary-format dictionary, 0 for raw content.
	frameDict uint32
}

func newArchive(ids []uint32) *archive {
	if len(ids) > 0 && ids[0] == 0 {
		ids = ids[1:] // snappy records need no dictionary
	}
	a := &archive{dicts: make([]dictSlot, len(ids))}
	for i, id := range ids {
		a.dicts[i].id = id
	}
	return a
}

// ids returns the dictionary span ids the archive was made with.
func (a *archive) ids() []uint32 {
	ids := make([]uint32, len(a.dicts))
	for i := range a.dicts {
		ids[i] = a.dicts[i].id
	}
	return ids
}

func (a *archive) slot(id uint32) *dictSlot {
	i := sort.Search(len(a.dicts), func(i int) bool { return a.dicts[i].id >= id })
	if i < len(a.dicts) && a.dicts[i].id == id {
		return &a.dicts[i]
	}
	return nil
}

func (a *archive) decode(t *Table, e Entry, stored, buf []byte) ([]byte, error) {
	if e.Dict == 0 {
		return decodeRecord(e, stored, buf)
	}
	d, err := a.dictionary(t, e.Dict)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			return nil, corruptf(int64(e.Offset), e.Addr.String(), "dictionary span %d: %s", e.Dict, ce.Reason)
		}
		return nil, fmt.Errorf("read chunk %s: %w", e.Addr, err)
	}
	h, err := zstdHeader(stored)
	if err != nil {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "%v", err)
	}
	if h.DictionaryID != d.frameDict {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "zstd frame names dictionary id %d, but dictionary span %d holds id %d", h.DictionaryID, e.Dict, d.frameDict)
	}
	out, err := decodeZstd(d.dec, stored, h, buf)
	if err != nil {
		return nil, corruptf(int64(e.Offset), e.Addr.String(), "zstd with dictionary span %d: %v", e.Dict, err)
	}
	return out, nil
}

// dictionary returns the decoder for dictionary span id, loading it with
// one read on first use. Concurrent first users wait for a single load.
// A corrupt dictionary is remembered; an IO error is retried next time.
func (a *archive) dictionary(t *Table, id uint32) (*dictDecoder, error) {
	s := a.slot(id)
	if s == nil {
		return nil, corruptf(-1, "", "no chunk in this archive uses it as a dictionary")
	}
	if d := s.dec.Load(); d != nil {
		return d, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dec.Load(); d != nil {
		return d, nil
	}
	if s.err != nil {
		return nil, s.err
	}
	d, err := loadDictionary(t, id)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			s.err = err
		}
		return nil, err
	}
	s.dec.Store(d)
	return d, nil
}

// dictDecoderConcurrency caps how many chunks one dictionary's decoder
// decodes at once. A loaded dictionary costs about 70 KiB (mostly the
// tables klauspost/compress builds from it), and each decoding slot a few
// KiB more once used.
var dictDecoderConcurrency = min(runtime.GOMAXPROCS(0), 8)

func loadDictionary(t *Table, id uint32) (*dictDecoder, error) {
	off, n, ok := t.idx.span(id)
	if !ok {
		return nil, corruptf(-1, "", "no such byte span")
	}
	stored := make([]byte, n)
	if err := readFull(t.r, stored, int64(off)); err != nil {
		return nil, fmt.Errorf("read dictionary span %d: %w", id, err)
	}
	if err := t.checkSpan(id, off, stored, ""); err != nil {
		return nil, err
	}
	plain, err := plainZstd()
	if err != nil {
		return nil, err
	}
	h, err := zstdHeader(stored)
	if err == nil && h.DictionaryID != 0 {
		err = fmt.Errorf("the dictionary's own frame names dictionary id %d", h.DictionaryID)
	}
	var dict []byte
	if err == nil {
		dict, err = decodeZstd(plain, stored, h, nil)
	}
	if err != nil {
		return nil, corruptf(int64(off), "", "dictionary at offset %d: %v", off, err)
	}
	opts := []zstd.DOption{
		zstd.WithDecoderConcurrency(dictDecoderConcurrency),
		zstd.WithDecoderMaxMemory(maxChunkLen),
	}
	d := &dictDecoder{}
	if len(dict) >= 8 && string(dict[:4]) == zdictMagic {
		d.frameDict = binary.LittleEndian.Uint32(dict[4:8])
		opts = append(opts, zstd.WithDecoderDicts(dict))
	} else {
		// Raw content (no dictionary header): frames made with it carry
		// no dictionary id.
		opts = append(opts, zstd.WithDecoderDictRaw(0, dict))
	}
	if d.dec, err = zstd.NewReader(nil, opts...); err != nil {
		return nil, corruptf(int64(off), "", "dictionary at offset %d: %v", off, err)
	}
	return d, nil
}

// plainZstd is the decoder for dictionary spans, which use no dictionary.
// It is only ever used through DecodeAll, so it starts no goroutines.
var plainZstd = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxChunkLen))
})

func zstdHeader(src []byte) (zstd.Header, error) {
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return h, fmt.Errorf("bad zstd frame header: %v", err)
	}
	if h.Skippable {
		return h, errors.New("a skippable zstd frame, not data")
	}
	return h, nil
}

// decodeZstd decodes src, which must be exactly one zstd frame with header
// h, with dec. It walks the frame's block headers first, which tells where
// the frame ends and the most it can decode to (raw and RLE blocks
// exactly, compressed blocks at most 128 KiB each). The decoder allocates
// a frame's declared content size up front, so that size is checked
// against what the blocks can hold; a frame that declares none grows its
// output as blocks actually decode. Either way a frame cannot make us
// allocate much more than it can really produce.
func decodeZstd(dec *zstd.Decoder, src []byte, h zstd.Header, buf []byte) ([]byte, error) {
	end, most, err := zstdFrameExtent(src, h)
	if err != nil {
		return nil, err
	}
	if end != len(src) {
		return nil, fmt.Errorf("%d bytes after the zstd frame", len(src)-end)
	}
	var dst []byte
	if h.HasFCS {
		if h.FrameContentSize > most || h.FrameContentSize > maxChunkLen {
			return nil, fmt.Errorf("frame claims %d bytes, but its blocks hold at most %d", h.FrameContentSize, min(most, maxChunkLen))
		}
		if uint64(cap(buf)) >= h.FrameContentSize {
			dst = buf[:0]
		} else {
			dst = make([]byte, 0, h.FrameContentSize)
		}
	}
	return dec.DecodeAll(src, dst)
}

// zstdFrameExtent walks the block headers of the frame at the start of src
// and returns where it ends and the most bytes it can decode to.
func zstdFrameExtent(src []byte, h zstd.Header) (end int, most uint64, err error) {
	pos := h.HeaderSize
	for {
		if len(src)-pos < 3 {
			return 0, 0, fmt.Errorf("zstd frame truncated at byte %d (block header)", pos)
		}
		bh := uint32(src[pos]) | uint32(src[pos+1])<<8 | uint32(src[pos+2])<<16
		pos += 3
		last, size := bh&1 != 0, int(bh>>3)
		if size > zstdMaxBlock {
			return 0, 0, fmt.Errorf("zstd block of %d bytes", size)
		}
		switch (bh >> 1) & 3 {
		case 0: // raw
			most += uint64(size)
		case 1: // RLE: one byte, repeated size times
			most += uint64(size)
			size = 1
		case 2: // compressed
			most += zstdMaxBlock
		default:
			return 0, 0, errors.New("reserved zstd block type")
		}
		if len(src)-pos < size {
			return 0, 0, fmt.Errorf("zstd frame truncated at byte %d (block of %d bytes)", pos, size)
		}
		pos += size
		if last {
			break
		}
	}
	if h.HasCheckSum {
		if len(src)-pos < 4 {
			return 0, 0, errors.New("zstd frame truncated in its checksum")
		}
		pos += 4
	}
	return pos, most, nil
}
