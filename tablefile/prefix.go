package tablefile

import (
	"math/bits"
	"sort"
)

// prefixes is a sorted list of 8-byte address prefixes with a radix table
// over their top bits, so that finding a prefix costs one table lookup and
// a scan of about four entries instead of a binary search over the whole
// list. Both formats keep their index sorted by prefix.
type prefixes struct {
	p      []uint64
	shift  uint     // 64 - radix bits
	bucket []uint32 // bucket[b] = first i with p[i]>>shift >= b; len = 1<<bits + 1
}

// newPrefixes takes ownership of p, which must be sorted.
func newPrefixes(p []uint64) prefixes {
	n := len(p)
	// About four prefixes per bucket: 1 byte of table per chunk.
	rbits := 0
	if n > 8 {
		rbits = bits.Len(uint(n/4)) - 1
	}
	if rbits > 28 {
		rbits = 28
	}
	ps := prefixes{p: p, shift: uint(64 - rbits)}
	nb := 1 << rbits
	ps.bucket = make([]uint32, nb+1)
	i := 0
	for b := 0; b <= nb; b++ {
		for i < n && (rbits == 0 && b > 0 || rbits > 0 && int(p[i]>>ps.shift) < b) {
			i++
		}
		ps.bucket[b] = uint32(i)
	}
	// With rbits == 0 the single bucket covers everything.
	if rbits == 0 {
		ps.bucket[0], ps.bucket[1] = 0, uint32(n)
	}
	return ps
}

// first returns the first index i with p[i] == v, or -1.
func (ps *prefixes) first(v uint64) int {
	var lo, hi int
	if ps.shift == 64 {
		lo, hi = 0, len(ps.p)
	} else {
		b := v >> ps.shift
		lo, hi = int(ps.bucket[b]), int(ps.bucket[b+1])
	}
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

func (ps *prefixes) memSize() int { return 8*len(ps.p) + 4*len(ps.bucket) }

func sortedUint64(p []uint64) bool {
	for i := 1; i < len(p); i++ {
		if p[i] < p[i-1] {
			return false
		}
	}
	return true
}
