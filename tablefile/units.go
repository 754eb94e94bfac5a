package tablefile

import (
	"crypto/sha256"
	"sort"
)

// A table file, read as bytes rather than chunks (to serve the file itself,
// or a byte range of it), is a sequence of units, each checkable on its
// own:
//
//	classic: | record | record | ... | record | index region            |
//	archive: | span   | span   | ... | span   | index, metadata, footer |
//	         0                                DataEnd                  size
//
// A classic record is a chunk's snappy bytes and their CRC-32C. An archive
// span holds a chunk's data, or a dictionary chunks were compressed with.
// The index region is every byte from DataEnd to the end of the file.

// UnitKind says what a Unit holds.
type UnitKind uint8

const (
	// UnitChunk is a chunk's record (classic) or data span (archive).
	UnitChunk UnitKind = iota + 1
	// UnitDict is an archive dictionary span.
	UnitDict
	// UnitOther is an archive span no chunk refers to.
	UnitOther
	// UnitIndex is the index region, from DataEnd to the end of the file.
	UnitIndex
)

// Unit is one checkable piece of a table file.
type Unit struct {
	Kind   UnitKind
	Offset uint64
	Length uint64
	// Entry is the chunk of a UnitChunk, or, for a UnitDict, a chunk
	// compressed with the dictionary: decoding it proves the dictionary.
	Entry Entry
	// Span is the archive span id (1-based); 0 in classic files and for
	// the index region.
	Span uint32
}

// End is the offset just past the unit.
func (u Unit) End() uint64 { return u.Offset + u.Length }

// Units returns the units overlapping the file range [off, end), in file
// order, without IO. The first call lists the whole file once and keeps
// the list (about 64 bytes per chunk); the slice returned is shared and
// must not be modified.
func (t *Table) Units(off, end uint64) []Unit {
	t.unitsOnce.Do(func() { t.units = t.listUnits() })
	us := t.units
	i := sort.Search(len(us), func(i int) bool { return us[i].End() > off })
	j := i
	for j < len(us) && us[j].Offset < end {
		j++
	}
	return us[i:j:j]
}

func (t *Table) listUnits() []Unit {
	var us []Unit
	if x, ok := t.idx.(*archiveIndex); ok {
		chunk := make(map[uint32]Entry, len(x.ends))
		dict := map[uint32]Entry{}
		t.idx.each(func(e Entry) {
			if _, seen := chunk[e.Span]; !seen {
				chunk[e.Span] = e
			}
			if _, seen := dict[e.Dict]; e.Dict != 0 && !seen {
				dict[e.Dict] = e
			}
		})
		us = make([]Unit, 0, len(x.ends)+1)
		for id := uint32(1); int(id) <= len(x.ends); id++ {
			off, n, _ := x.span(id)
			u := Unit{Kind: UnitOther, Offset: off, Length: uint64(n), Span: id}
			if e, ok := dict[id]; ok {
				u.Kind, u.Entry = UnitDict, e
			} else if e, ok := chunk[id]; ok {
				u.Kind, u.Entry = UnitChunk, e
			}
			us = append(us, u)
		}
	} else {
		es := t.Entries()
		us = make([]Unit, 0, len(es)+1)
		for _, e := range es {
			us = append(us, Unit{Kind: UnitChunk, Offset: e.Offset, Length: uint64(e.Length), Entry: e})
		}
	}
	end := t.idx.dataEnd()
	return append(us, Unit{Kind: UnitIndex, Offset: uint64(end), Length: uint64(t.size - end)})
}

// CheckUnit checks a unit's stored bytes by checksum, without decoding
// them: a classic record (or an archive's snappy span) against its own
// CRC-32C, an archive span against its CRC-32C in the sums, the index
// region against the SHA-256 Open computed (Options.IndexHash or
// Options.Sums). checked is false when there is nothing to check against:
// an archive span without sums, an index region not hashed. A unit that
// fails is an ErrCorrupt.
func (t *Table) CheckUnit(u Unit, stored []byte) (checked bool, err error) {
	if uint64(len(stored)) != u.Length {
		return false, corruptf(int64(u.Offset), "", "unit at %d is %d bytes, %d given", u.Offset, u.Length, len(stored))
	}
	switch {
	case u.Kind == UnitIndex:
		if !t.hashedIndex {
			return false, nil
		}
		if sha256.Sum256(stored) != t.indexHash {
			return true, corruptf(int64(u.Offset), "", "index region does not hash to the one this table was opened with")
		}
		return true, nil
	case u.Span != 0 && t.sums != nil && t.sums.Spans != nil:
		return true, t.checkSpan(u.Span, u.Offset, stored, "")
	case u.Kind == UnitChunk && u.Entry.Dict == 0:
		return true, checkRecordCRC(u.Entry, stored)
	}
	return false, nil
}

// DictSpan returns the file range of the archive dictionary e was
// compressed with, or ok = false for a chunk stored without one (a snappy
// record).
func (t *Table) DictSpan(e Entry) (off uint64, length uint32, ok bool) {
	if e.Dict == 0 {
		return 0, 0, false
	}
	return t.idx.span(e.Dict)
}
