package btree

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestHugeSerialType: a record whose serial type is the largest a varint
// holds (a value of about 2^63 bytes) is an error, not a slice past the
// page or a sum that wraps.
func TestHugeSerialType(t *testing.T) {
	b := make([]byte, 4096)
	b[0] = byte(IndexLeaf)
	binary.BigEndian.PutUint16(b[3:], 1)   // one cell
	binary.BigEndian.PutUint16(b[8:], 100) // at offset 100
	b[100] = 10                            // payload size
	b[101] = 10                            // record header size
	for i := 102; i < 111; i++ {
		b[i] = 0xff // serial type 2^64-1
	}
	p, err := Parse(b, 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.IndexRowids(); !errors.Is(err, ErrMalformed) {
		t.Errorf("IndexRowids: %v, want ErrMalformed", err)
	}

	// Two such types, then a value: the sizes must not add up past the
	// int range to an offset inside the record.
	rec := make([]byte, 64)
	rec[0] = 21 // header: its size, two 9-byte types, two 1-byte types
	for i := 1; i < 19; i++ {
		rec[i] = 0xff
	}
	rec[19], rec[20] = 1, 1
	if v, err := (Record{b: rec, end: 30}).Column(2); !errors.Is(err, ErrSpilled) {
		t.Errorf("Column(2): %v, %v; want ErrSpilled", v, err)
	}
}

// TestChildrenRepeated: interior pages whose every cell names the same
// child (a B-tree as a DAG) are refused, not walked once per path (2,000
// cells on each of three levels would be 8e9 leaves).
func TestChildrenRepeated(t *testing.T) {
	page := func(child int64, leaf bool) []byte {
		b := make([]byte, 4096)
		if leaf {
			b[0] = byte(IndexLeaf)
			return b
		}
		b[0] = byte(IndexInterior)
		const cells = 2000
		binary.BigEndian.PutUint16(b[3:], cells)
		binary.BigEndian.PutUint32(b[8:], uint32(child))
		for i := 0; i < cells; i++ {
			binary.BigEndian.PutUint16(b[12+2*i:], 4080)
		}
		binary.BigEndian.PutUint32(b[4080:], uint32(child))
		b[4084] = 1
		return b
	}
	pages := map[int64][]byte{2: page(3, false), 3: page(4, false), 4: page(5, false), 5: page(0, true)}
	reads := 0
	read := func(n int64) ([]byte, error) { reads++; return pages[n], nil }
	if _, err := Leaves(read, 2, 4096); !errors.Is(err, ErrMalformed) {
		t.Errorf("Leaves: %v, want ErrMalformed", err)
	}
	if reads > 10 {
		t.Errorf("%d pages read for a tree of 4", reads)
	}
}
