package cache

import (
	"fmt"
	"sort"

	"github.com/chunkd/chunkd/tablefile"
)

// A download cuts its file into blocks: runs of whole units (records,
// archive spans, the index region; tablefile.Unit) of about blockBytes,
// cut at unit boundaries, so that each block can be proven on its own.
// Each block moves through these states, under download.mu:
//
//	missing ──claim──▶ fetching ──written──▶ arrived ──claim──▶ proving ──▶ proven
//	   ▲                  │ (a demand read or stream proves          │
//	   └──── released ────┘  in memory: straight to proven)  ◀─fail──┘ (the download fails)
//
// Only the fetcher that claimed a block writes it, so a proven block's
// bytes in the file are never written again. The prover (a low-priority
// thread) claims an arrived block as prover-proving, which a reader takes
// over rather than wait for a thread that may not run for a while. A
// reader that needs only some units of an arrived block (a page of a
// random lookup) proves those alone, claiming nothing: each unit is proven
// once (two readers of one unit at one moment may both prove it), and the
// block is proven when its last unit is.
type blockState uint8

const (
	blockMissing       blockState = iota // not asked for yet
	blockStreamed                        // claimed by a stream (a ranged GET), on its way
	blockRead                            // claimed by a demand read (one ranged read)
	blockArrived                         // written, not proven yet
	blockProverProving                   // being proven by the prover; a reader may take it over
	blockProving                         // being proven by a reader
	blockProven                          // proven: may be served
)

// blockBytes is about how large a block is: a demand read of one chunk
// fetches its block, so a block is a few records' worth of a round trip.
const blockBytes = 64 << 10

// blockMap is a file's blocks: block i covers [starts[i], starts[i+1])
// and holds units[first[i]:first[i+1]]. It never changes once made.
type blockMap struct {
	starts []int64
	first  []int
	units  []tablefile.Unit
}

func newBlockMap(units []tablefile.Unit) *blockMap {
	m := &blockMap{units: units}
	for i, u := range units {
		if len(m.starts) == 0 || int64(u.Offset)-m.starts[len(m.starts)-1] >= blockBytes {
			m.starts = append(m.starts, int64(u.Offset))
			m.first = append(m.first, i)
		}
	}
	if n := len(units); n > 0 {
		m.starts = append(m.starts, int64(units[n-1].End()))
	} else {
		m.starts = append(m.starts, 0)
	}
	m.first = append(m.first, len(units))
	return m
}

// check reports whether the units cover [0, size) exactly, one after
// the other, as the formats lay them out: every byte of the file then
// belongs to a block, and to a unit that can be checked.
func (m *blockMap) check(size int64) error {
	var at int64
	for _, u := range m.units {
		if int64(u.Offset) != at {
			return fmt.Errorf("the file's units leave bytes %d to %d out", at, u.Offset)
		}
		at = int64(u.End())
	}
	if at != size {
		return fmt.Errorf("the file's units end at %d, the file at %d", at, size)
	}
	return nil
}

// count is the number of blocks.
func (m *blockMap) count() int { return len(m.starts) - 1 }

// span returns block i's bytes.
func (m *blockMap) span(i int) (lo, hi int64) { return m.starts[i], m.starts[i+1] }

// blockUnits returns the units of blocks [i, j).
func (m *blockMap) blockUnits(i, j int) []tablefile.Unit { return m.units[m.first[i]:m.first[j]] }

// unitRange returns the indexes [k0, k1) in units of blocks [i, j)'s units.
func (m *blockMap) unitRange(i, j int) (k0, k1 int) { return m.first[i], m.first[j] }

// blockOfUnit returns the block holding unit k.
func (m *blockMap) blockOfUnit(k int) int {
	return sort.Search(m.count(), func(b int) bool { return m.first[b+1] > k })
}

// unitsOverlapping returns the indexes [k0, k1) of the units that overlap
// bytes [lo, hi).
func (m *blockMap) unitsOverlapping(lo, hi int64) (k0, k1 int) {
	us := m.units
	k0 = sort.Search(len(us), func(k int) bool { return int64(us[k].End()) > lo })
	k1 = sort.Search(len(us), func(k int) bool { return int64(us[k].Offset) >= hi })
	return k0, max(k0, k1)
}

// covering returns the blocks [i, j) that cover bytes [lo, hi).
func (m *blockMap) covering(lo, hi int64) (i, j int) {
	n := m.count()
	i = sort.Search(n, func(k int) bool { return m.starts[k+1] > lo })
	j = sort.Search(n, func(k int) bool { return m.starts[k] >= hi })
	return i, max(i, j)
}

// unitsIn returns the units that overlap [lo, hi).
func (m *blockMap) unitsIn(lo, hi int64) []tablefile.Unit {
	us := m.units
	i := sort.Search(len(us), func(k int) bool { return int64(us[k].End()) > lo })
	j := i
	for j < len(us) && int64(us[j].Offset) < hi {
		j++
	}
	return us[i:j:j]
}
