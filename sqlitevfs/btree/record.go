package btree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrSpilled is a record value that is not on the page: the record spills
// onto overflow pages before the value ends.
var ErrSpilled = errors.New("btree: value on an overflow page")

// Record is a record (a row or an index key) in SQLite's record format: a
// header of serial types, then the values. It may be only the part of a
// record that is on its page.
type Record struct {
	b        []byte
	off, end int  // the record (its part on the page) is b[off:end]
	spilled  bool // the rest is on overflow pages
}

// Ints calls fn with the position i and value v of each integer value
// of the record, in order, and the number of values n; it stops at the
// end of the page's part of a spilled record (ErrSpilled). It allocates
// nothing: the scans that call it read every entry of a leaf.
func (r Record) Ints(fn func(i, n int, v int64)) error {
	at, body, err := r.bounds()
	if err != nil {
		return err
	}
	hdr := r.b[:body]
	n := 0
	for a := at; a < len(hdr); n++ {
		_, tw := Varint(hdr, a)
		if tw == 0 {
			return errors.New("btree: serial type past the record header's end")
		}
		a += tw
	}
	for i := 0; at < len(hdr); i++ {
		t, tw := Varint(hdr, at)
		at += tw
		size := serialSize(t)
		if size > r.end-body {
			return ErrSpilled
		}
		switch {
		case t >= 1 && t <= 6:
			fn(i, n, intValue(r.b[body:body+size]))
		case t == 8, t == 9:
			fn(i, n, int64(t-8))
		}
		body += size
	}
	return nil
}

// intValue decodes a big-endian two's-complement integer of 1 to 8 bytes.
func intValue(v []byte) int64 {
	var x int64
	for i, c := range v {
		if i == 0 {
			x = int64(int8(c)) // sign-extend from the top byte
		} else {
			x = x<<8 | int64(c)
		}
	}
	return x
}

// Column returns value i of the record: nil (NULL), int64, float64,
// string (text) or []byte (a blob; it shares the page's bytes). A value
// past the record's last is an error; one past the page's part of a
// spilled record, or past the end of a malformed one, is ErrSpilled.
func (r Record) Column(i int) (any, error) {
	types, body, err := r.header()
	if err != nil {
		return nil, err
	}
	if i >= len(types) {
		return nil, fmt.Errorf("btree: column %d of a record of %d", i, len(types))
	}
	return r.valueAfter(types, i, body)
}

// last returns the record's last value.
func (r Record) last() (any, error) {
	types, body, err := r.header()
	if err != nil {
		return nil, err
	}
	if len(types) == 0 {
		return nil, errors.New("btree: empty record")
	}
	return r.valueAfter(types, len(types)-1, body)
}

// valueAfter returns value i, whose types are types and whose first
// value starts at body.
func (r Record) valueAfter(types []uint64, i, body int) (any, error) {
	for _, t := range types[:i] {
		size := serialSize(t)
		if size > r.end-body {
			return nil, ErrSpilled
		}
		body += size
	}
	return r.value(types[i], body)
}

// header returns the record's serial types and the offset of its first
// value.
func (r Record) header() ([]uint64, int, error) {
	at, body, err := r.bounds()
	if err != nil {
		return nil, 0, err
	}
	var types []uint64
	for at < body {
		t, tw := Varint(r.b[:body], at)
		if tw == 0 {
			return nil, 0, errors.New("btree: serial type past the record header's end")
		}
		types = append(types, t)
		at += tw
	}
	return types, body, nil
}

// bounds returns the offsets of the record header's first serial type
// and of the record's first value (the header's end).
func (r Record) bounds() (at, body int, err error) {
	if r.off < 0 || r.off > r.end || r.end > len(r.b) {
		return 0, 0, errors.New("btree: record past the page's end")
	}
	size, w := Varint(r.b[:r.end], r.off)
	if w == 0 || int(size) < w {
		return 0, 0, errors.New("btree: malformed record header size")
	}
	if size > uint64(r.end-r.off) {
		return 0, 0, ErrSpilled // a header longer than the page's part of the record
	}
	return r.off + w, r.off + int(size), nil
}

// serialSize is the size of a value of serial type t, capped at
// maxValue (no page holds more, and sums of a few stay far from
// overflowing).
func serialSize(t uint64) int {
	if t >= 2*maxValue+12 {
		return maxValue
	}
	switch {
	case t <= 4:
		return [...]int{0, 1, 2, 3, 4}[t]
	case t == 5:
		return 6
	case t == 6, t == 7:
		return 8
	case t < 12:
		return 0
	}
	return int((t - 12) / 2)
}

// maxValue caps serialSize: larger than any page (64 KiB), small enough
// that sizes added up never overflow an int.
const maxValue = 1 << 20

func (r Record) value(t uint64, at int) (any, error) {
	size := serialSize(t)
	if at < r.off || at > r.end || size > r.end-at {
		return nil, ErrSpilled
	}
	v := r.b[at : at+size]
	switch {
	case t == 0:
		return nil, nil
	case t <= 6:
		return intValue(v), nil
	case t == 7:
		return math.Float64frombits(binary.BigEndian.Uint64(v)), nil
	case t == 8:
		return int64(0), nil
	case t == 9:
		return int64(1), nil
	case t < 12:
		return nil, fmt.Errorf("btree: reserved serial type %d", t)
	case t%2 == 0:
		return v, nil
	}
	return string(v), nil
}
