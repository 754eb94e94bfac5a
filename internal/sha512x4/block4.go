package sha512x4

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// k holds the SHA-512 round constants K[t] (FIPS 180-4 §4.2.3): the first 64
// bits of the fractional parts of the cube roots of the first 80 primes.
var k = [80]uint64{
	0x428a2f98d728ae22, 0x7137449123ef65cd, 0xb5c0fbcfec4d3b2f, 0xe9b5dba58189dbbc,
	0x3956c25bf348b538, 0x59f111f1b605d019, 0x923f82a4af194f9b, 0xab1c5ed5da6d8118,
	0xd807aa98a3030242, 0x12835b0145706fbe, 0x243185be4ee4b28c, 0x550c7dc3d5ffb4e2,
	0x72be5d74f27b896f, 0x80deb1fe3b1696b1, 0x9bdc06a725c71235, 0xc19bf174cf692694,
	0xe49b69c19ef14ad2, 0xefbe4786384f25e3, 0x0fc19dc68b8cd5b5, 0x240ca1cc77ac9c65,
	0x2de92c6f592b0275, 0x4a7484aa6ea6e483, 0x5cb0a9dcbd41fbd4, 0x76f988da831153b5,
	0x983e5152ee66dfab, 0xa831c66d2db43210, 0xb00327c898fb213f, 0xbf597fc7beef0ee4,
	0xc6e00bf33da88fc2, 0xd5a79147930aa725, 0x06ca6351e003826f, 0x142929670a0e6e70,
	0x27b70a8546d22ffc, 0x2e1b21385c26c926, 0x4d2c6dfc5ac42aed, 0x53380d139d95b3df,
	0x650a73548baf63de, 0x766a0abb3c77b2a8, 0x81c2c92e47edaee6, 0x92722c851482353b,
	0xa2bfe8a14cf10364, 0xa81a664bbc423001, 0xc24b8b70d0f89791, 0xc76c51a30654be30,
	0xd192e819d6ef5218, 0xd69906245565a910, 0xf40e35855771202a, 0x106aa07032bbd1b8,
	0x19a4c116b8d2d0c8, 0x1e376c085141ab53, 0x2748774cdf8eeb99, 0x34b0bcb5e19b48a8,
	0x391c0cb3c5c95a63, 0x4ed8aa4ae3418acb, 0x5b9cca4f7763e373, 0x682e6ff3d6b2b8a3,
	0x748f82ee5defb2fc, 0x78a5636f43172f60, 0x84c87814a1f0ab72, 0x8cc702081a6439ec,
	0x90befffa23631e28, 0xa4506cebde82bde9, 0xbef9a3f7b2c67915, 0xc67178f2e372532b,
	0xca273eceea26619c, 0xd186b8c721c0c207, 0xeada7dd6cde0eb1e, 0xf57d4f7fee6ed178,
	0x06f067aa72176fba, 0x0a637dc5a2c898a6, 0x113f9804bef90dae, 0x1b710b35131c471b,
	0x28db77f523047d84, 0x32caab7b40c72493, 0x3c9ebe0a15c9bebc, 0x431d67c49c100d4c,
	0x4cc5d4becb3e42b6, 0x597f299cfc657e2a, 0x5fcb6fab3ad6faec, 0x6c44198c4a475817,
}

// blocks4Go is the portable four-lane compression, written from FIPS 180-4
// §6.4.2: it compresses n blocks of each lane, lane l's blocks read from
// st.p[l] on. No production path uses it (where there is no AVX2,
// crypto/sha512 one message at a time is faster); tests hold the lane manager
// and the assembly against it.
func blocks4Go(st *lanes, n int) {
	var w [80]uint64
	for l := range st.p {
		base := unsafe.Pointer(st.p[l])
		var h [8]uint64
		for j := range h {
			h[j] = st.h[j][l]
		}
		for i := range n {
			blk := unsafe.Slice((*byte)(unsafe.Add(base, i*blockSize)), blockSize)
			for t := range 16 {
				w[t] = binary.BigEndian.Uint64(blk[8*t:])
			}
			for t := 16; t < 80; t++ {
				s0 := bits.RotateLeft64(w[t-15], -1) ^ bits.RotateLeft64(w[t-15], -8) ^ w[t-15]>>7
				s1 := bits.RotateLeft64(w[t-2], -19) ^ bits.RotateLeft64(w[t-2], -61) ^ w[t-2]>>6
				w[t] = s1 + w[t-7] + s0 + w[t-16]
			}
			a, b, c, d, e, f, g, hh := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
			for t := range 80 {
				S1 := bits.RotateLeft64(e, -14) ^ bits.RotateLeft64(e, -18) ^ bits.RotateLeft64(e, -41)
				ch := e&f ^ ^e&g
				t1 := hh + S1 + ch + k[t] + w[t]
				S0 := bits.RotateLeft64(a, -28) ^ bits.RotateLeft64(a, -34) ^ bits.RotateLeft64(a, -39)
				maj := a&b ^ a&c ^ b&c
				t2 := S0 + maj
				hh, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
			}
			h[0] += a
			h[1] += b
			h[2] += c
			h[3] += d
			h[4] += e
			h[5] += f
			h[6] += g
			h[7] += hh
		}
		for j := range h {
			st.h[j][l] = h[j]
		}
	}
}
