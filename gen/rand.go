package gen

import "math/bits"

// rng is a small splitmix64 generator. It is defined here rather than taken
// from math/rand so that the byte stream it produces for a seed can never
// change under us: generated files must stay identical across Go releases.
type rng struct{ s uint64 }

func newRNG(seed int64, stream uint64) *rng {
	r := &rng{s: uint64(seed) ^ (stream * 0xd1342543de82ef95)}
	r.next() // mix the seed once so nearby seeds diverge at once
	return r
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a value in [0, n). n must be > 0. The bias of the
// multiply-shift reduction is below 2^-40 for the sizes used here.
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// between returns a value in [lo, hi].
func (r *rng) between(lo, hi int) int {
	return lo + r.intn(hi-lo+1)
}
