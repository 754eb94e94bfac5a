package sha512x4

import (
	"bytes"
	"crypto/sha512"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
)

// paths are the ways sums can hash on this machine.
func paths(t testing.TB) []path {
	ps := []path{pathEach, pathGo}
	if haveAVX2 {
		ps = append(ps, pathAVX2)
	} else {
		t.Logf("no AVX2 assembly in this build (another architecture, a CPU without AVX2, or the purego tag): it is not tested")
	}
	return ps
}

func (p path) String() string {
	return [...]string{"each", "go", "avx2"}[p]
}

// check hashes msgs on every path and compares each digest with crypto/sha512.
func check(t *testing.T, name string, msgs [][]byte) {
	t.Helper()
	for _, p := range paths(t) {
		out := make([][Size]byte, len(msgs)+1)
		sentinel := [Size]byte{1, 2, 3}
		out[len(msgs)] = sentinel
		sums(msgs, out, p)
		for i, m := range msgs {
			if want := sha512.Sum512(m); out[i] != want {
				t.Fatalf("%s, path %s: message %d of %d (%d bytes): got %x, want %x", name, p, i, len(msgs), len(m), out[i][:8], want[:8])
			}
		}
		if out[len(msgs)] != sentinel {
			t.Fatalf("%s, path %s: wrote past the last message's digest", name, p)
		}
	}
}

func random(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestEveryLengthTo300(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var msgs [][]byte
	for n := range 301 {
		msgs = append(msgs, random(r, n))
	}
	check(t, "lengths 0..300", msgs)
	// The same lengths in the reverse order, so each lane sees other neighbours.
	rev := make([][]byte, len(msgs))
	for i, m := range msgs {
		rev[len(msgs)-1-i] = m
	}
	check(t, "lengths 300..0", rev)
}

func TestBlockBoundaries(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var lens []int
	for _, b := range []int{128, 256, 384, 1024, 4096, 8192} {
		for _, d := range []int{-17, -16, -15, -1, 0, 1} {
			lens = append(lens, b+d)
		}
	}
	// One message of each length among three others of the same length, and
	// among three of other lengths.
	for _, n := range lens {
		check(t, fmt.Sprintf("four of %d bytes", n), [][]byte{random(r, n), random(r, n), random(r, n), random(r, n)})
		check(t, fmt.Sprintf("%d bytes among others", n), [][]byte{random(r, 5), random(r, n), random(r, 300), random(r, 2000)})
	}
	check(t, "all boundary lengths", func() (ms [][]byte) {
		for _, n := range lens {
			ms = append(ms, random(r, n))
		}
		return ms
	}())
}

func TestRandomLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var msgs [][]byte
	for range 200 {
		msgs = append(msgs, random(r, r.IntN(20001)))
	}
	check(t, "200 random lengths up to 20000", msgs)
}

func TestBatchSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 18 {
		for trial := range 5 {
			msgs := make([][]byte, n)
			for i := range msgs {
				// Long and short mixed, so lanes end at different times and refill.
				if r.IntN(2) == 0 {
					msgs[i] = random(r, r.IntN(200))
				} else {
					msgs[i] = random(r, 1000+r.IntN(9000))
				}
			}
			check(t, fmt.Sprintf("batch of %d, trial %d", n, trial), msgs)
		}
	}
}

func TestHugeBesideTiny(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	huge := random(r, 1<<20+77)
	var first, last, middle [][]byte
	first = append(first, huge)
	for range 40 {
		tiny := random(r, r.IntN(64))
		first = append(first, tiny)
		last = append(last, tiny)
		middle = append(middle, tiny)
	}
	last = append(last, huge)
	middle = append(middle[:20:20], append([][]byte{huge}, middle[20:]...)...)
	check(t, "huge first", first)
	check(t, "huge last", last)
	check(t, "huge in the middle", middle)
	check(t, "two huge", [][]byte{huge, huge[1:], random(r, 3)})
}

func TestAliasing(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	buf := random(r, 10000)
	var msgs [][]byte
	for i := 0; i+300 <= len(buf); i += 97 {
		msgs = append(msgs, buf[i:i+300], buf[i:], buf[:i], buf[i:i])
	}
	check(t, "overlapping views of one array", msgs)
	same := [][]byte{buf, buf, buf, buf, buf, buf[:4096], buf[:4096]}
	check(t, "the same message many times", same)
}

func TestMessagesUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	msgs := make([][]byte, 9)
	copies := make([][]byte, 9)
	for i := range msgs {
		msgs[i] = random(r, 100+i*333)
		copies[i] = bytes.Clone(msgs[i])
	}
	for _, p := range paths(t) {
		sums(msgs, make([][Size]byte, len(msgs)), p)
		for i := range msgs {
			if !bytes.Equal(msgs[i], copies[i]) {
				t.Fatalf("path %s changed message %d", p, i)
			}
		}
	}
}

func TestShortOutPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Sums with 3 messages and room for 2 digests did not panic")
		}
	}()
	Sums(make([][]byte, 3), make([][Size]byte, 2))
}

func TestResume(t *testing.T) {
	// The lane manager hands unfinished lanes to crypto/sha512 in its
	// BinaryMarshaler form; if that form stopped being read, finish would
	// silently hash from the start, correct but slow.
	r := rand.New(rand.NewPCG(15, 16))
	m := random(r, 5*blockSize+9)
	var st lanes
	for j := range iv {
		st.h[j][2] = iv[j]
	}
	st.p = [4]*byte{&m[0], &m[0], &m[0], &m[0]}
	blocks4Go(&st, 3)
	var h [8]uint64
	for j := range h {
		h[j] = st.h[j][2]
	}
	d, err := resume(h, 3*blockSize)
	if err != nil {
		t.Fatal(err)
	}
	d.Write(m[3*blockSize:])
	if got, want := d.Sum(nil), sha512.Sum512(m); !bytes.Equal(got, want[:]) {
		t.Fatalf("resumed digest %x, want %x", got[:8], want[:8])
	}
}

// TestAVX2MatchesGo compares the two compression functions on random state
// and blocks, lane by lane, without the lane manager.
func TestAVX2MatchesGo(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 assembly in this build (another architecture, a CPU without AVX2, or the purego tag)")
	}
	r := rand.New(rand.NewPCG(17, 18))
	for trial := range 50 {
		n := 1 + r.IntN(9)
		var a, b lanes
		var data [4][]byte
		for l := range 4 {
			data[l] = random(r, n*blockSize)
			a.p[l] = &data[l][0]
			for j := range 8 {
				a.h[j][l] = r.Uint64()
			}
		}
		b = a
		blocks4Go(&a, n)
		blocks4AVX2(&b, n)
		if a.h != b.h {
			t.Fatalf("trial %d, %d blocks: AVX2 state %x, Go state %x", trial, n, b.h, a.h)
		}
	}
}

// TestConstants derives K and H(0) from their definitions in FIPS 180-4: the
// first 64 bits of the fractional parts of the cube roots of the first 80
// primes, and of the square roots of the first 8.
func TestConstants(t *testing.T) {
	var primes []int64
	for x := int64(2); len(primes) < 80; x++ {
		if big.NewInt(x).ProbablyPrime(0) {
			primes = append(primes, x)
		}
	}
	frac := func(p int64, root int) uint64 {
		// floor(root-th root of p * 2^(64*root)), low 64 bits.
		n := new(big.Int).Lsh(big.NewInt(p), uint(64*root))
		lo, hi := big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), 80)
		for new(big.Int).Sub(hi, lo).Cmp(big.NewInt(1)) > 0 {
			mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
			if new(big.Int).Exp(mid, big.NewInt(int64(root)), nil).Cmp(n) <= 0 {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo.Uint64()
	}
	for i, p := range primes {
		if got := frac(p, 3); k[i] != got {
			t.Errorf("K[%d] = %#x, want %#x", i, k[i], got)
		}
	}
	for i, p := range primes[:8] {
		if got := frac(p, 2); iv[i] != got {
			t.Errorf("H0[%d] = %#x, want %#x", i, iv[i], got)
		}
	}
}

func FuzzSums(f *testing.F) {
	f.Add([]byte(""), uint8(4))
	f.Add([]byte("abc"), uint8(1))
	f.Add(bytes.Repeat([]byte{0x61}, 1000), uint8(7))
	f.Add(bytes.Repeat([]byte{0xff, 0}, 300), uint8(13))
	f.Fuzz(func(t *testing.T, data []byte, cuts uint8) {
		// Split data into messages at points derived from its bytes, some
		// of them overlapping.
		var msgs [][]byte
		n := int(cuts%17) + 1
		for i := range n {
			if len(data) == 0 {
				msgs = append(msgs, nil)
				continue
			}
			a := int(data[i%len(data)]) * len(data) / 256
			b := a + int(data[(i+1)%len(data)])*(i+1)*7
			msgs = append(msgs, data[a:min(b, len(data))])
		}
		msgs = append(msgs, data)
		check(t, "fuzz", msgs)
	})
}
