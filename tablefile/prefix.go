package tablefile

import (
	"math/bits"
	"sort"
)

// radix is a table over the top bits of sorted 8-byte address prefixes:
// bucket[b] is the first position whose prefix's top bits are >= b. Since
// addresses are uniform hashes, a bucket holds about four positions, so
// finding a prefix costs one table read and a short scan instead of a
// binary search over the whole index. It costs about 1 byte per chunk.
type radix struct {
	shift  uint     // 64 - radix bits; 64 means one bucket
	bucket []uint32 // len 1<<bits + 1
}

// newRadix builds the table for n sorted prefixes given by at.
func newRadix(n int, at func(i int) uint64) radix {
	rbits := 0
	if n > 8 {
		rbits = bits.Len(uint(n/4)) - 1
	}
	if rbits > 28 {
		rbits = 28
	}
	r := radix{shift: uint(64 - rbits), bucket: make([]uint32, 1<<rbits+1)}
	if rbits == 0 {
		r.bucket[1] = uint32(n)
		return r
	}
	i := 0
	for b := range r.bucket {
		for i < n && at(i)>>r.shift < uint64(b) {
			i++
		}
		r.bucket[b] = uint32(i)
	}
	return r
}

// bounds returns the positions [lo, hi) that may hold prefix v.
func (r *radix) bounds(v uint64) (lo, hi int) {
	if r.shift == 64 {
		return int(r.bucket[0]), int(r.bucket[1])
	}
	b := v >> r.shift
	return int(r.bucket[b]), int(r.bucket[b+1])
}

func (r *radix) memSize() int { return 4 * len(r.bucket) }

// prefixes is a sorted list of prefixes with a radix table over it.
type prefixes struct {
	radix
	p []uint64
}

// newPrefixes takes ownership of p, which must be sorted.
func newPrefixes(p []uint64) prefixes {
	return prefixes{radix: newRadix(len(p), func(i int) uint64 { return p[i] }), p: p}
}

// first returns the first index i with p[i] == v, or -1.
func (ps *prefixes) first(v uint64) int {
	lo, hi := ps.bounds(v)
	if hi-lo > 16 {
		lo += sort.Search(hi-lo, func(k int) bool { return ps.p[lo+k] >= v })
	} else {
		for lo < hi && ps.p[lo] < v {
			lo++
		}
	}
	if lo < len(ps.p) && ps.p[lo] == v {
		return lo
	}
	return -1
}

func (ps *prefixes) memSize() int { return 8*len(ps.p) + ps.radix.memSize() }

func sortedUint64(p []uint64) bool {
	for i := 1; i < len(p); i++ {
		if p[i] < p[i-1] {
			return false
		}
	}
	return true
}
