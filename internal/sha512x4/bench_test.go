package sha512x4

import (
	"crypto/sha512"
	"math/rand/v2"
	"testing"
)

// BenchmarkSums hashes batches on the AVX2 path and with a crypto/sha512 loop
// side by side: 64 messages of 4 KiB (SQLite pages), and 64 of 1-16 KiB.
func BenchmarkSums(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	sets := []struct {
		name string
		msgs [][]byte
	}{
		{"4KiBx64", make([][]byte, 64)},
		{"1-16KiBx64", make([][]byte, 64)},
	}
	for i := range sets[0].msgs {
		sets[0].msgs[i] = random(r, 4096)
		sets[1].msgs[i] = random(r, 1024+r.IntN(15*1024+1))
	}
	for _, s := range sets {
		total := 0
		for _, m := range s.msgs {
			total += len(m)
		}
		out := make([][Size]byte, len(s.msgs))
		b.Run(s.name+"/crypto-sha512", func(b *testing.B) {
			b.SetBytes(int64(total))
			for b.Loop() {
				for i, m := range s.msgs {
					out[i] = sha512.Sum512(m)
				}
			}
		})
		b.Run(s.name+"/avx2", func(b *testing.B) {
			if !haveAVX2 {
				b.Skip("no AVX2 assembly in this build")
			}
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				sums(s.msgs, out, pathAVX2)
			}
		})
	}
}

// BenchmarkBlocks4AVX2 measures the assembly alone: 64 blocks in each lane a
// call, no lane manager.
func BenchmarkBlocks4AVX2(b *testing.B) {
	if !haveAVX2 {
		b.Skip("no AVX2 assembly in this build")
	}
	data := make([]byte, 4*64*blockSize)
	var st lanes
	for l := range 4 {
		st.p[l] = &data[l*64*blockSize]
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		blocks4AVX2(&st, 64)
	}
}
