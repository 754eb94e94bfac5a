package sqlchunks

// A chunkd SQLite database is a versioned SQLite database file stored as
// content-addressed chunks in Dolt table files (package tablefile), named
// by a Dolt manifest (package manifest) whose storage format is
// manifest.FormatChunkdSQLite, so Dolt tools leave it alone. Import writes
// versions; OpenPages reads one.
//
//	manifest  4|5 : __CHUNKD_SQLITE_1__ : lock : root : ... : table files
//	                                              │
//	           ┌──────────────────────────────────┘
//	           ▼
//	      root chunk ──parent──► root chunk of the previous version ──► … ──► zero
//	           │ map
//	           ▼
//	      map chunk, level d-1 (inner: up to MapFanout child map addresses)
//	           │ …
//	           ▼
//	      map chunk, level 0 (leaf: up to MapFanout page addresses)
//	           │
//	           ▼
//	      page chunk = the page's bytes, exactly page-size long
//
// Every page of the database file is one chunk, addressed like any chunk
// (addr.Of of its bytes), so a page that did not change between versions
// - and every all-zero page - is stored once. The page map lists the
// address of every page, in page order, as a tree of map chunks: level 0
// holds page addresses, level k+1 holds addresses of level-k chunks. Every
// chunk of a level is full except the last one, so the chunk, and the slot
// within it, that holds page n follow from n alone; the tree is depth
// levels tall, the fewest that reach a single chunk (a database of 0 pages
// has one empty leaf).
//
// Root chunk (the manifest's root; one per version):
//
//	+----------------------------+------------+------------------+
//	| magic "chunkd-sqlite-root\0" | version u8 | JSON object      |
//	|         19 bytes           |     1      |                  |
//	+----------------------------+------------+------------------+
//
//	{"page_size":4096,"pages":1234,"map":"<address>","depth":1,
//	 "fanout":1000,"parent":"<address>","time":1700000000,"message":"…",
//	 "interior":"…","new_bytes":30933}
//
// parent is "" for the first version; time is Unix seconds; interior
// lists the pages that held interior B-tree pages (encodeInterior);
// new_bytes is the bytes of pages and page-map chunks the import added to
// the database (absent in roots of older imports). A reader
// refuses a version byte it does not know; fields may be added to the JSON
// under the same version (readers ignore unknown fields).
//
// Map chunk (integers big-endian):
//
//	+---------------------------+---------+---------+----------+-----------+-----------+---------------------+
//	| magic "chunkd-sqlite-map\0" | version | kind    | level u8 | count u32 | first u64 | count × address [20]|
//	|         18 bytes          | u8 (1)  | 'L'/'I' |          |           |           |                     |
//	+---------------------------+---------+---------+----------+-----------+-----------+---------------------+
//
// kind is 'L' for a leaf (level 0, addresses of pages) and 'I' for an
// inner chunk (level ≥ 1, addresses of map chunks of level-1); first is the
// 0-based position, among the chunks (or pages) of the level below, of the
// first address. A map chunk is 33 + 20·count bytes: always odd, so never
// the size of a page (a power of two from 512), and it begins with its
// magic, so neither can be taken for the other. With MapFanout 1000 a full
// map chunk is 20,033 bytes (19.6 KiB): a 1 GiB database of 4 KiB pages
// has a two-level map of 263 chunks (5.1 MiB), and changing 10 scattered
// pages rewrites at most 10 leaves and the inner chunk above them.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chunkd/chunkd/addr"
)

// Format constants; see the layout above.
const (
	// RootMagic starts every root chunk.
	RootMagic = "chunkd-sqlite-root\x00"
	// MapMagic starts every page-map chunk.
	MapMagic = "chunkd-sqlite-map\x00"
	// FormatVersion is the version byte of root and map chunks this
	// package writes and reads.
	FormatVersion = 1
	// MapFanout is how many addresses a map chunk holds at most.
	MapFanout = 1000

	mapLeaf    = 'L'
	mapInner   = 'I'
	mapHeader  = len(MapMagic) + 1 + 1 + 1 + 4 + 8 // 33
	maxFanout  = 1 << 16                           // accepted in a root written by another chunkd
	maxDepth   = 16
	maxMessage = 1 << 20
)

// ErrNotRoot is wrapped by the error for a chunk that is not a root chunk
// of a chunkd SQLite database.
var ErrNotRoot = errors.New("not a chunkd SQLite root chunk")

// ErrBadMap is wrapped by the errors for a page map that does not decode
// or does not fit its root.
var ErrBadMap = errors.New("bad page map")

// rootJSON is the JSON part of a root chunk.
type rootJSON struct {
	PageSize int    `json:"page_size"`
	Pages    int64  `json:"pages"`
	Map      string `json:"map"`
	Depth    int    `json:"depth"`
	Fanout   int    `json:"fanout"`
	Parent   string `json:"parent"`
	Time     int64  `json:"time"`
	Message  string `json:"message"`
	// Interior lists the interior B-tree pages (see root.interior),
	// encoded by encodeInterior; absent in roots of older imports.
	Interior string `json:"interior,omitempty"`
	// NewBytes is root.newBytes; absent in roots of older imports.
	NewBytes *int64 `json:"new_bytes,omitempty"`
}

// root is a decoded root chunk.
type root struct {
	pageSize int
	pages    int64
	mapRoot  addr.Addr
	depth    int
	fanout   int
	parent   addr.Addr
	time     int64
	message  string
	// interior are the pages that held interior B-tree pages when the
	// version was imported (ascending, at most maxInterior): with page 1,
	// what a reader needs to descend to any row. A hint for reading ahead
	// (OpenSet), never trusted for what a page holds.
	interior []int64
	// newBytes is how many bytes of pages and page-map chunks the version
	// added to its database when it was imported (chunks no table file
	// held before); -1 when its root does not say.
	newBytes int64
}

func (r *root) encode() []byte {
	j := rootJSON{
		PageSize: r.pageSize,
		Pages:    r.pages,
		Map:      r.mapRoot.String(),
		Depth:    r.depth,
		Fanout:   r.fanout,
		Time:     r.time,
		Message:  r.message,
		Interior: encodeInterior(r.interior),
	}
	if r.newBytes >= 0 {
		j.NewBytes = &r.newBytes
	}
	if !r.parent.IsEmpty() {
		j.Parent = r.parent.String()
	}
	body, err := json.Marshal(j)
	if err != nil { // cannot happen: plain fields
		panic(err)
	}
	b := make([]byte, 0, len(RootMagic)+1+len(body))
	b = append(b, RootMagic...)
	b = append(b, FormatVersion)
	return append(b, body...)
}

// decodeRoot parses and checks a root chunk. Errors wrap ErrNotRoot when
// the bytes are no root chunk at all.
func decodeRoot(b []byte) (*root, error) {
	if len(b) < len(RootMagic)+1 || string(b[:len(RootMagic)]) != RootMagic {
		what := "it does not start with the root magic"
		switch {
		case bytes.HasPrefix(b, []byte(MapMagic)):
			what = "it is a page-map chunk"
		case bytes.HasPrefix(b, []byte("SQLite format 3\x00")):
			what = "it is page 1 of a database"
		case isPageSize(len(b)):
			what = fmt.Sprintf("it is %d bytes, the size of a database page", len(b))
		}
		return nil, fmt.Errorf("%w (%s)", ErrNotRoot, what)
	}
	if v := b[len(RootMagic)]; v != FormatVersion {
		return nil, fmt.Errorf("root chunk format version %d; this chunkd reads version %d (written by a newer chunkd?)", v, FormatVersion)
	}
	var j rootJSON
	if err := json.Unmarshal(b[len(RootMagic)+1:], &j); err != nil {
		return nil, fmt.Errorf("root chunk: bad JSON: %w", err)
	}
	r := &root{pageSize: j.PageSize, pages: j.Pages, depth: j.Depth, fanout: j.Fanout, time: j.Time, message: j.Message, newBytes: -1}
	if j.NewBytes != nil {
		r.newBytes = *j.NewBytes
	}
	var err error
	if r.interior, err = decodeInterior(j.Interior, j.Pages); err != nil {
		return nil, fmt.Errorf("root chunk: interior pages: %w", err)
	}
	if r.mapRoot, err = addr.Parse(j.Map); err != nil {
		return nil, fmt.Errorf("root chunk: map: %w", err)
	}
	if j.Parent != "" {
		if r.parent, err = addr.Parse(j.Parent); err != nil {
			return nil, fmt.Errorf("root chunk: parent: %w", err)
		}
	}
	switch {
	case !isPageSize(r.pageSize):
		return nil, fmt.Errorf("root chunk: page size %d is not a power of two from 512 to 65536", r.pageSize)
	case r.pages < 0 || r.pages > (1<<62)/int64(r.pageSize):
		return nil, fmt.Errorf("root chunk: page count %d out of range", r.pages)
	case r.fanout < 2 || r.fanout > maxFanout:
		return nil, fmt.Errorf("root chunk: map fanout %d out of range [2, %d]", r.fanout, maxFanout)
	case r.depth != mapDepth(r.pages, r.fanout):
		return nil, fmt.Errorf("root chunk: map depth %d, but %d pages at fanout %d need %d", r.depth, r.pages, r.fanout, mapDepth(r.pages, r.fanout))
	}
	return r, nil
}

// setPages returns the pages of a version's open set: page 1 and the
// interior pages its root lists (interior, ascending), page 1 once.
func setPages(interior []int64) []int64 {
	if len(interior) > 0 && interior[0] == 1 {
		return interior
	}
	return append([]int64{1}, interior...)
}

// maxInterior bounds the interior pages a root lists (16 MiB of 4 KiB
// pages: far more than a database of hundreds of GiB has).
const maxInterior = 4096

// encodeInterior encodes ascending page numbers as the base64 of their
// uvarint differences.
func encodeInterior(pages []int64) string {
	if len(pages) == 0 {
		return ""
	}
	var b []byte
	prev := int64(0)
	for _, p := range pages {
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// decodeInterior decodes encodeInterior's form: ascending pages of 1..n,
// at most maxInterior.
func decodeInterior(s string, n int64) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	var out []int64
	prev := int64(0)
	for len(b) > 0 {
		d, k := binary.Uvarint(b)
		if k <= 0 || d == 0 || d > uint64(n) || prev+int64(d) > n || len(out) == maxInterior {
			return nil, fmt.Errorf("not ascending pages of 1..%d (at most %d)", n, maxInterior)
		}
		prev += int64(d)
		out = append(out, prev)
		b = b[k:]
	}
	return out, nil
}

// isInterior reports whether page n (1-based) of pageSize bytes starts
// like an interior B-tree page (table 0x05, index 0x02; page 1's B-tree
// header follows the 100-byte database header). Overflow and freelist
// pages may look alike now and then: the list is a hint.
func isInterior(n int64, page []byte) bool {
	off := 0
	if n == 1 {
		off = 100
	}
	return len(page) > off && (page[off] == 0x05 || page[off] == 0x02)
}

func isPageSize(n int) bool { return n >= 512 && n <= 65536 && n&(n-1) == 0 }

// mapDepth is the number of levels of the page map of n pages.
func mapDepth(n int64, fanout int) int {
	d := 1
	for n > int64(fanout) {
		n = (n + int64(fanout) - 1) / int64(fanout)
		d++
	}
	return d
}

// encodeMap encodes one map chunk of the given level holding as, whose
// first entry is entry number first of the level below.
func encodeMap(level int, first int64, as []addr.Addr) []byte {
	b := make([]byte, 0, mapHeader+len(as)*addr.Size)
	b = append(b, MapMagic...)
	b = append(b, FormatVersion)
	if level == 0 {
		b = append(b, mapLeaf)
	} else {
		b = append(b, mapInner)
	}
	b = append(b, byte(level))
	b = binary.BigEndian.AppendUint32(b, uint32(len(as)))
	b = binary.BigEndian.AppendUint64(b, uint64(first))
	for _, a := range as {
		b = append(b, a[:]...)
	}
	return b
}

// decodeMap checks that b is the map chunk of the given level starting at
// entry first with count addresses, and appends them to dst.
func decodeMap(dst []addr.Addr, b []byte, level int, first int64, count int) ([]addr.Addr, error) {
	if len(b) < mapHeader || string(b[:len(MapMagic)]) != MapMagic {
		return nil, fmt.Errorf("%w: not a page-map chunk (%d bytes, no map magic)", ErrBadMap, len(b))
	}
	h := b[len(MapMagic):mapHeader]
	version, kind, lvl := h[0], h[1], int(h[2])
	n := int(binary.BigEndian.Uint32(h[3:7]))
	f := binary.BigEndian.Uint64(h[7:15])
	wantKind := byte(mapInner)
	if level == 0 {
		wantKind = mapLeaf
	}
	switch {
	case version != FormatVersion:
		return nil, fmt.Errorf("%w: map chunk format version %d, want %d", ErrBadMap, version, FormatVersion)
	case kind != wantKind || lvl != level:
		return nil, fmt.Errorf("%w: map chunk is kind %q level %d, want kind %q level %d", ErrBadMap, kind, lvl, wantKind, level)
	case n != count || f != uint64(first):
		return nil, fmt.Errorf("%w: map chunk holds %d entries from %d, want %d from %d", ErrBadMap, n, f, count, first)
	case len(b) != mapHeader+n*addr.Size:
		return nil, fmt.Errorf("%w: map chunk of %d entries is %d bytes, want %d", ErrBadMap, n, len(b), mapHeader+n*addr.Size)
	}
	for i := range n {
		var a addr.Addr
		copy(a[:], b[mapHeader+i*addr.Size:])
		dst = append(dst, a)
	}
	return dst, nil
}

// mapChunk is one encoded map chunk.
type mapChunk struct {
	addr addr.Addr
	data []byte
}

// buildMap builds the page map of pages (their addresses in page order)
// and returns its root address, its depth and its chunks, top level first.
func buildMap(pages []addr.Addr, fanout int) (addr.Addr, int, []mapChunk) {
	var levels [][]mapChunk
	cur := pages
	for level := 0; ; level++ {
		var chunks []mapChunk
		var next []addr.Addr
		for i := 0; i < len(cur) || i == 0; i += fanout {
			data := encodeMap(level, int64(i), cur[i:min(i+fanout, len(cur))])
			a := addr.Of(data)
			chunks = append(chunks, mapChunk{a, data})
			next = append(next, a)
		}
		levels = append(levels, chunks)
		if len(next) == 1 {
			var all []mapChunk
			for l := len(levels) - 1; l >= 0; l-- {
				all = append(all, levels[l]...)
			}
			return next[0], len(levels), all
		}
		cur = next
	}
}

// levelCounts returns the number of entries of each map level, from the
// top: counts[0] is 1 (the root chunk's entries are counts[1]... ), and
// the last is the page count. Level k from the top has counts[k] chunks
// holding counts[k+1] entries.
func levelCounts(pages int64, fanout, depth int) []int64 {
	counts := make([]int64, depth+1)
	counts[depth] = pages
	for k := depth - 1; k >= 0; k-- {
		counts[k] = max(1, (counts[k+1]+int64(fanout)-1)/int64(fanout))
	}
	return counts
}
