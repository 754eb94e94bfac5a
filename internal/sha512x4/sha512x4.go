// Package sha512x4 computes the SHA-512 digests of many independent messages
// at once: on amd64 with AVX2 it hashes four messages side by side, one in
// each 64-bit element of the 256-bit registers (multi-buffer hashing). On an
// AMD EPYC (Zen 3) core that is about 2.4 times crypto/sha512's throughput for
// 4 KiB messages (BenchmarkSums).
//
// It exists because chunk addresses are SHA-512 digests and chunkd checks
// every chunk it serves: on the cold path (a download streaming a table file
// from the store, a Dolt clone through the service) CPU profiles show
// crypto/sha512 at about half of all CPU, and no maintained Go library hashes
// several SHA-512 messages at once.
//
// Elsewhere (other architectures, CPUs without AVX2, the purego build tag)
// Sums calls crypto/sha512 for each message.
//
// # How the lanes are fed
//
// The assembly compresses n 128-byte blocks in lockstep for four lanes, reading
// each lane's blocks through its own pointer and keeping the state transposed
// ([8][4]uint64: word, then lane). Each lane holds one message at a time. A
// lane first reads the message's whole blocks in place; its last one or two
// blocks (the remaining bytes, 0x80, zeros and the 128-bit bit length) are
// built in a small per-lane buffer. When a lane's message ends its digest is
// taken out and the next message goes in. Once no message is waiting and fewer
// than minLanes lanes are busy, the lanes still reading whole blocks hand
// their state to crypto/sha512 (through its BinaryUnmarshaler form), which is
// faster than the assembly with most lanes idle.
package sha512x4

import (
	"crypto/sha512"
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// Size is the length of a SHA-512 digest.
const Size = sha512.Size

const blockSize = 128

// minLanes is how many busy lanes keep the four-lane assembly worth running
// once no message is waiting.
const minLanes = 2

// maxBlocks bounds the blocks of one assembly call, which cannot be
// preempted, to about 30 µs of work.
const maxBlocks = 64

// Sums sets out[i] to the SHA-512 digest of msgs[i]. It panics if out is
// shorter than msgs. Messages may have any lengths and may share memory.
func Sums(msgs [][]byte, out [][Size]byte) {
	sums(msgs, out, best)
}

// path says how sums hashes; tests run every path on one machine.
type path int

const (
	pathEach path = iota // crypto/sha512, one message after another
	pathGo               // the lane manager over blocks4Go, the portable four-lane compression
	pathAVX2             // the lane manager over blocks4AVX2
)

// best is the fastest path on this CPU.
var best = func() path {
	if haveAVX2 {
		return pathAVX2
	}
	return pathEach
}()

func sums(msgs [][]byte, out [][Size]byte, p path) {
	if len(out) < len(msgs) {
		panic(fmt.Sprintf("sha512x4: %d messages but room for %d digests", len(msgs), len(out)))
	}
	if p == pathEach || len(msgs) < 2 {
		for i, m := range msgs {
			out[i] = sha512.Sum512(m)
		}
		return
	}
	multi(msgs, out, p == pathAVX2)
}

// iv is the initial hash value H(0) of SHA-512 (FIPS 180-4 §5.3.5).
var iv = [8]uint64{
	0x6a09e667f3bcc908, 0xbb67ae8584caa73b, 0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1,
	0x510e527fade682d1, 0x9b05688c2b3e6c1f, 0x1f83d9abfb41bd6b, 0x5be0cd19137e2179,
}

// lanes is what the compression functions read and write.
type lanes struct {
	h [8][4]uint64 // hash state, h[word][lane]
	p [4]*byte     // where each lane's next block starts
}

// lane is the lane manager's view of one lane.
type lane struct {
	msg   int    // index of the message in the lane; -1 when idle
	body  []byte // whole blocks of the message not yet compressed
	done  int    // bytes of the message compressed so far (whole blocks only)
	tail  int    // index of the next tail block to compress
	ntail int    // tail blocks in pad
	pad   [2 * blockSize]byte
}

func multi(msgs [][]byte, out [][Size]byte, avx2 bool) {
	var st lanes
	var ls [4]lane
	next := 0
	load := func(l int) {
		ln := &ls[l]
		if next == len(msgs) {
			ln.msg = -1
			return
		}
		m := msgs[next]
		ln.msg = next
		next++
		whole := len(m) &^ (blockSize - 1)
		ln.body = m[:whole]
		ln.done = 0
		ln.tail = 0
		r := copy(ln.pad[:], m[whole:])
		ln.pad[r] = 0x80
		ln.ntail = 1
		if r >= blockSize-16 {
			ln.ntail = 2
		}
		end := ln.ntail * blockSize
		clear(ln.pad[r+1 : end-16])
		binary.BigEndian.PutUint64(ln.pad[end-16:], uint64(len(m))>>61)
		binary.BigEndian.PutUint64(ln.pad[end-8:], uint64(len(m))<<3)
		for j := range iv {
			st.h[j][l] = iv[j]
		}
	}
	for l := range ls {
		load(l)
	}
	for {
		busy := 0
		for l := range ls {
			if ls[l].msg >= 0 {
				busy++
			}
		}
		if busy > 0 && busy < minLanes && next == len(msgs) {
			for l := range ls {
				if ls[l].msg >= 0 && len(ls[l].body) > 0 {
					out[ls[l].msg] = finish(&st, l, msgs[ls[l].msg], ls[l].done)
					ls[l].msg = -1
					busy--
				}
			}
		}
		if busy == 0 {
			return
		}
		// n blocks can be read from every busy lane's current segment.
		n := maxBlocks
		var some *byte
		for l := range ls {
			ln := &ls[l]
			if ln.msg < 0 {
				continue
			}
			if len(ln.body) > 0 {
				st.p[l] = &ln.body[0]
				n = min(n, len(ln.body)/blockSize)
			} else {
				st.p[l] = &ln.pad[ln.tail*blockSize]
				n = min(n, ln.ntail-ln.tail)
			}
			some = st.p[l]
		}
		// Idle lanes hash a busy lane's blocks into state nobody reads.
		for l := range ls {
			if ls[l].msg < 0 {
				st.p[l] = some
			}
		}
		if avx2 {
			blocks4AVX2(&st, n)
		} else {
			blocks4Go(&st, n)
		}
		for l := range ls {
			ln := &ls[l]
			if ln.msg < 0 {
				continue
			}
			if len(ln.body) > 0 {
				ln.body = ln.body[n*blockSize:]
				ln.done += n * blockSize
				continue
			}
			ln.tail += n
			if ln.tail < ln.ntail {
				continue
			}
			d := &out[ln.msg]
			for j := range iv {
				binary.BigEndian.PutUint64(d[8*j:], st.h[j][l])
			}
			load(l)
		}
	}
}

// finish hashes m from byte done on with crypto/sha512, starting from lane l's
// state.
func finish(st *lanes, l int, m []byte, done int) [Size]byte {
	var h [8]uint64
	for j := range h {
		h[j] = st.h[j][l]
	}
	d, err := resume(h, done)
	if err != nil {
		// A crypto/sha512 that no longer reads this form: start over.
		return sha512.Sum512(m)
	}
	d.Write(m[done:])
	var sum [Size]byte
	d.Sum(sum[:0])
	return sum
}

// resume returns a crypto/sha512 hash that has compressed done bytes (a
// multiple of the block size) into state h. It builds the hash's
// BinaryMarshaler form: magic, state, a block of buffered input (none here),
// length so far. crypto/sha512 promises to read the forms it once wrote.
func resume(h [8]uint64, done int) (hash.Hash, error) {
	var b [4 + 8*8 + blockSize + 8]byte
	copy(b[:], "sha\x07")
	for j, w := range h {
		binary.BigEndian.PutUint64(b[4+8*j:], w)
	}
	binary.BigEndian.PutUint64(b[len(b)-8:], uint64(done))
	d := sha512.New()
	u, ok := d.(encoding.BinaryUnmarshaler)
	if !ok {
		return nil, errors.New("sha512x4: crypto/sha512 hash has no UnmarshalBinary")
	}
	if err := u.UnmarshalBinary(b[:]); err != nil {
		return nil, fmt.Errorf("sha512x4: resume crypto/sha512: %w", err)
	}
	return d, nil
}
