// Package btree reads SQLite's B-tree pages, as the file format lays them
// out (https://www.sqlite.org/fileformat2.html, "B-tree Pages"): a page's
// kind, the children an interior page names, the way down a table's
// B-tree to the leaf that holds a rowid, the records of a leaf (an index's
// entries, a table's rows) and the rows of the schema table. It reads
// bytes it is given and does no I/O; the VFS uses it to fetch the table
// leaves a scan is about to look rows up in before SQLite asks for them
// one by one.
//
// Every function checks what it reads against the page's bounds and
// returns an error, never a panic, on a page that is not what it should
// be: the bytes come from a database file, and a wrong guess about which
// page is which costs a useless prefetch, never a wrong answer.
package btree

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a B-tree page's type, its header's first byte.
type Kind byte

// The four kinds of B-tree page.
const (
	IndexInterior Kind = 0x02
	TableInterior Kind = 0x05
	IndexLeaf     Kind = 0x0a
	TableLeaf     Kind = 0x0d
)

// ErrMalformed is a page that does not parse as the B-tree page it should
// be (wrapped, with the page and what was wrong).
var ErrMalformed = errors.New("btree: malformed page")

// fileHeader is the size of the database header at the start of page 1.
const fileHeader = 100

// Page is one B-tree page of a database. Its methods read its bytes in
// place; the bytes must not change while it is used.
type Page struct {
	b      []byte
	n      int64 // the page's number, for messages
	hdr    int   // offset of the B-tree header (100 on page 1)
	usable int   // the page size less the reserved bytes at each page's end
	kind   Kind
	cells  int
}

// PageSize returns the page size page 1's header gives (offset 16; 1 means
// 65536), 0 if page1 is shorter than the header.
func PageSize(page1 []byte) int {
	if len(page1) < fileHeader {
		return 0
	}
	size := int(binary.BigEndian.Uint16(page1[16:18]))
	if size == 1 {
		size = 65536
	}
	return size
}

// Usable returns the usable size of the database's pages from page 1's
// bytes: the page size less the bytes reserved at the end of each page
// (header offset 20).
func Usable(page1 []byte) (int, error) {
	if len(page1) < fileHeader {
		return 0, fmt.Errorf("%w: page 1 has %d bytes, less than the 100-byte header", ErrMalformed, len(page1))
	}
	size := PageSize(page1)
	if size < 512 || size&(size-1) != 0 {
		return 0, fmt.Errorf("%w: page 1: page size %d is not a power of two from 512 to 65536", ErrMalformed, size)
	}
	usable := size - int(page1[20])
	if usable < 480 {
		return 0, fmt.Errorf("%w: page 1: usable page size %d (page size %d, %d reserved) is below SQLite's 480", ErrMalformed, usable, size, page1[20])
	}
	return usable, nil
}

// KindOf returns the kind byte of page n (its header follows the file
// header on page 1), which is a B-tree kind only if the page is a B-tree
// page: check with IsBTree.
func KindOf(b []byte, n int64) Kind {
	off := 0
	if n == 1 {
		off = fileHeader
	}
	if len(b) <= off {
		return 0
	}
	return Kind(b[off])
}

// IsBTree reports whether k is one of the four B-tree page kinds.
func (k Kind) IsBTree() bool {
	return k == IndexInterior || k == TableInterior || k == IndexLeaf || k == TableLeaf
}

// Interior reports whether k is an interior kind.
func (k Kind) Interior() bool { return k == IndexInterior || k == TableInterior }

// Parse reads the header of B-tree page n (its bytes b, the database's
// usable page size).
func Parse(b []byte, n int64, usable int) (Page, error) {
	p := Page{b: b, n: n, usable: min(usable, len(b))}
	if n == 1 {
		p.hdr = fileHeader
	}
	p.kind = KindOf(b, n)
	if !p.kind.IsBTree() {
		return Page{}, p.errorf("kind 0x%02x is no B-tree page's", byte(p.kind))
	}
	if p.hdr+p.headerSize() > p.usable {
		return Page{}, p.errorf("header past the page's end")
	}
	p.cells = int(binary.BigEndian.Uint16(b[p.hdr+3:]))
	if p.hdr+p.headerSize()+2*p.cells > p.usable {
		return Page{}, p.errorf("%d cells do not fit the page", p.cells)
	}
	return p, nil
}

func (p Page) errorf(format string, args ...any) error {
	return fmt.Errorf("%w %d: %s", ErrMalformed, p.n, fmt.Sprintf(format, args...))
}

// Kind returns the page's kind.
func (p Page) Kind() Kind { return p.kind }

// Cells returns the number of cells on the page.
func (p Page) Cells() int { return p.cells }

func (p Page) headerSize() int {
	if p.kind.Interior() {
		return 12
	}
	return 8
}

// cell returns the offset of cell i's first byte.
func (p Page) cell(i int) (int, error) {
	off := int(binary.BigEndian.Uint16(p.b[p.hdr+p.headerSize()+2*i:]))
	if off < p.hdr+p.headerSize() || off >= p.usable {
		return 0, p.errorf("cell %d at offset %d, outside the cell area", i, off)
	}
	return off, nil
}

// child returns the left child pointer of an interior page's cell at off.
func (p Page) child(off int) (int64, error) {
	if off+4 > p.usable {
		return 0, p.errorf("child pointer at offset %d past the page's end", off)
	}
	c := int64(binary.BigEndian.Uint32(p.b[off:]))
	if c < 1 {
		return 0, p.errorf("child pointer 0")
	}
	return c, nil
}

// rightmost returns an interior page's right-most child pointer.
func (p Page) rightmost() (int64, error) { return p.child(p.hdr + 8) }

// Children returns the children of an interior page, in key order: the
// left child of each cell, then the right-most pointer.
func (p Page) Children() ([]int64, error) {
	if !p.kind.Interior() {
		return nil, p.errorf("children of a leaf (kind 0x%02x)", byte(p.kind))
	}
	out := make([]int64, 0, p.cells+1)
	for i := 0; i < p.cells; i++ {
		off, err := p.cell(i)
		if err != nil {
			return nil, err
		}
		c, err := p.child(off)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	r, err := p.rightmost()
	if err != nil {
		return nil, err
	}
	return append(out, r), nil
}

// TableKeys returns a table interior page's keys and children:
// children[i] holds the rowids up to keys[i] (and above keys[i-1]); the
// last child, the right-most pointer, those above the last key. Step
// finds the child for a rowid in them.
func (p Page) TableKeys() (keys, children []int64, err error) {
	if p.kind != TableInterior {
		return nil, nil, p.errorf("keys of a page of kind 0x%02x, not a table interior page", byte(p.kind))
	}
	keys = make([]int64, p.cells)
	children = make([]int64, p.cells+1)
	for i := 0; i < p.cells; i++ {
		off, err := p.cell(i)
		if err != nil {
			return nil, nil, err
		}
		if children[i], err = p.child(off); err != nil {
			return nil, nil, err
		}
		k, _, err := p.varint(off + 4)
		if err != nil {
			return nil, nil, err
		}
		keys[i] = int64(k)
	}
	if children[p.cells], err = p.rightmost(); err != nil {
		return nil, nil, err
	}
	return keys, children, nil
}

// Step returns the child of a table interior page (its TableKeys) that
// holds rowid.
func Step(keys, children []int64, rowid int64) int64 {
	lo, hi := 0, len(keys) // the first key >= rowid
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if keys[m] < rowid {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return children[lo]
}

// IndexRowids returns the rowid each cell of an index leaf points at: the
// last value of its record. A cell whose record spills onto overflow
// pages (a key too long to fit) is passed over: its rowid is not on this
// page. For an index of a WITHOUT ROWID table the last value is a key
// column, not a rowid; the caller knows which indexes it asks about.
func (p Page) IndexRowids() ([]int64, error) {
	out := make([]int64, 0, p.cells)
	err := p.IndexRecords(func(r Record) error {
		v, err := r.last()
		if errors.Is(err, ErrSpilled) && r.spilled {
			return nil // the rowid is on an overflow page
		}
		if err != nil {
			return p.errorf("%v", err)
		}
		if rowid, ok := v.(int64); ok {
			out = append(out, rowid)
		}
		return nil
	})
	return out, err
}

// IndexRecords calls fn with the local part of the record of each cell
// of an index leaf (an index's entry, or a WITHOUT ROWID table's row), in
// order. A record that spills onto overflow pages is cut at the page:
// Record.Column says so for a value past the cut.
func (p Page) IndexRecords(fn func(r Record) error) error {
	if p.kind != IndexLeaf {
		return p.errorf("records of a page of kind 0x%02x, not an index leaf", byte(p.kind))
	}
	return p.Entries(func(_ int64, r Record) error { return fn(r) })
}

// TableRows calls fn with the rowid and the local part of the record of
// each cell of a table leaf, in order. A record that spills onto overflow
// pages is cut at the page: Record.Column says so for a value past the
// cut.
func (p Page) TableRows(fn func(rowid int64, r Record) error) error {
	if p.kind != TableLeaf {
		return p.errorf("rows of a page of kind 0x%02x, not a table leaf", byte(p.kind))
	}
	return p.Entries(fn)
}

// RowidSpan returns the rowids of a table leaf's first and last cells:
// the leaf holds no row outside [lo, hi] (its B-tree's keys are in order).
func (p Page) RowidSpan() (lo, hi int64, err error) {
	if p.kind != TableLeaf || p.cells == 0 {
		return 0, 0, p.errorf("rowid span of a page of kind 0x%02x with %d cells, not a table leaf with rows", byte(p.kind), p.cells)
	}
	if lo, err = p.rowidAt(0); err != nil {
		return 0, 0, err
	}
	if hi, err = p.rowidAt(p.cells - 1); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, p.errorf("rowids out of order: %d before %d", lo, hi)
	}
	return lo, hi, nil
}

// rowidAt returns the rowid of a table leaf's cell i: after the payload's
// size.
func (p Page) rowidAt(i int) (int64, error) {
	off, err := p.cell(i)
	if err != nil {
		return 0, err
	}
	_, w, err := p.varint(off)
	if err != nil {
		return 0, err
	}
	rowid, _, err := p.varint(off + w)
	return int64(rowid), err
}

// Entries calls fn with each cell of a leaf page of either kind, in
// order: a table leaf's rowid (0 on an index leaf) and the local part of
// its record. A leaf cell is the payload's size, a table leaf's rowid,
// then the payload (its first part, if it spills onto overflow pages).
func (p Page) Entries(fn func(rowid int64, r Record) error) error {
	if p.kind != TableLeaf && p.kind != IndexLeaf {
		return p.errorf("entries of a page of kind 0x%02x, not a leaf", byte(p.kind))
	}
	table := p.kind == TableLeaf
	for i := 0; i < p.cells; i++ {
		off, err := p.cell(i)
		if err != nil {
			return err
		}
		size, w, err := p.varint(off)
		if err != nil {
			return err
		}
		start := off + w
		var rowid uint64
		if table {
			var w2 int
			if rowid, w2, err = p.varint(start); err != nil {
				return err
			}
			start += w2
		}
		local := p.local(int64(size), table)
		if start+local > p.usable {
			return p.errorf("cell %d: record past the page's end", i)
		}
		if err := fn(int64(rowid), Record{b: p.b[:p.usable], off: start, end: start + local, spilled: uint64(local) < size}); err != nil {
			return err
		}
	}
	return nil
}

// maxLocal is the most payload a cell keeps on the page (X in the file
// format's terms): table leaves U-35, index pages ((U-12)*64/255)-23.
func (p Page) maxLocal(table bool) int {
	if table {
		return p.usable - 35
	}
	return (p.usable-12)*64/255 - 23
}

// local returns how much of a leaf cell's payload of size bytes is on
// the page (of a table leaf, or of an index page).
func (p Page) local(size int64, table bool) int {
	x := p.maxLocal(table)
	if size <= int64(x) {
		return int(size)
	}
	m := int64((p.usable-12)*32/255 - 23)
	k := m + (size-m)%int64(p.usable-4)
	if k <= int64(x) {
		return int(k)
	}
	return int(m)
}

func (p Page) varint(off int) (uint64, int, error) {
	v, w := Varint(p.b[:min(len(p.b), p.usable)], off)
	if w == 0 {
		return 0, 0, p.errorf("varint at offset %d past the page's end", off)
	}
	return v, w, nil
}

// Varint decodes SQLite's variable-length integer at b[off:]: big-endian,
// seven bits a byte while the high bit is set, all eight bits of a ninth.
// It returns the value and its width, 0 if b ends first.
func Varint(b []byte, off int) (uint64, int) {
	var v uint64
	for i := 0; i < 9; i++ {
		if off+i >= len(b) {
			return 0, 0
		}
		c := b[off+i]
		if i == 8 {
			return v<<8 | uint64(c), 9
		}
		v = v<<7 | uint64(c&0x7f)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return v, 9 // not reached
}
