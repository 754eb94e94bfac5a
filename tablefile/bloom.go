package tablefile

import (
	"math/bits"

	"github.com/chunkd/chunkd/addr"
)

// DefaultBloomBitsPerKey gives a false-positive rate under 1 % for the
// blocked filter below.
const DefaultBloomBitsPerKey = 12

const (
	bloomBlockBits  = 512 // one 64-byte cache line
	bloomBlockWords = bloomBlockBits / 64
)

// Bloom is a blocked bloom filter over chunk addresses: every address sets
// and tests k bits inside one 64-byte block, so a test costs one cache
// miss. Addresses are already uniform hashes, so their bits are used
// directly; nothing is rehashed.
type Bloom struct {
	words  []uint64
	blocks uint64
	k      int
}

// NewBloom sizes a filter for n addresses at bitsPerKey bits each.
func NewBloom(n, bitsPerKey int) *Bloom {
	if n < 1 {
		n = 1
	}
	total := uint64(n) * uint64(bitsPerKey)
	blocks := (total + bloomBlockBits - 1) / bloomBlockBits
	// k = ln2 · bits/key is the optimum for a plain filter; a blocked one
	// does best slightly lower.
	k := bitsPerKey * 6 / 10
	if k < 1 {
		k = 1
	}
	if k > 16 {
		k = 16
	}
	return &Bloom{words: make([]uint64, blocks*bloomBlockWords), blocks: blocks, k: k}
}

func (f *Bloom) probe(a addr.Addr) (block uint64, h1, h2 uint64) {
	p := a.Prefix()
	block, _ = bits.Mul64(p, f.blocks)
	s := a.Suffix()
	h1 = uint64(s[0])<<24 | uint64(s[1])<<16 | uint64(s[2])<<8 | uint64(s[3])
	h2 = uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7]) | 1
	return block * bloomBlockWords, h1, h2
}

// Add records address a.
func (f *Bloom) Add(a addr.Addr) {
	base, h1, h2 := f.probe(a)
	for i := 0; i < f.k; i++ {
		bit := (h1 + uint64(i)*h2) % bloomBlockBits
		f.words[base+bit/64] |= 1 << (bit % 64)
	}
}

// MayContain reports false if a was certainly never added.
func (f *Bloom) MayContain(a addr.Addr) bool {
	base, h1, h2 := f.probe(a)
	for i := 0; i < f.k; i++ {
		bit := (h1 + uint64(i)*h2) % bloomBlockBits
		if f.words[base+bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// MemSize returns the filter's size in bytes.
func (f *Bloom) MemSize() int { return 8 * len(f.words) }
