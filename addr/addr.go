// Package addr holds chunk addresses: the first 20 bytes of the SHA-512 of a
// chunk's uncompressed bytes, written as text in Dolt's base32 alphabet
// (0-9a-v, no padding, 32 characters), which sorts like the bytes.
package addr

import (
	"bytes"
	"crypto/sha512"
	"encoding/base32"
	"encoding/binary"
	"fmt"

	"github.com/chunkd/chunkd/internal/sha512x4"
)

// Size is the length of an address in bytes.
const Size = 20

// TextSize is the length of an address's text form.
const TextSize = 32

// PrefixSize and SuffixSize split an address the way table-file indexes do.
const (
	PrefixSize = 8
	SuffixSize = Size - PrefixSize
)

const alphabet = "0123456789abcdefghijklmnopqrstuv"

var encoding = base32.NewEncoding(alphabet).WithPadding(base32.NoPadding)

// Addr is a chunk address.
type Addr [Size]byte

// Empty is the all-zero address.
var Empty Addr

// Of returns the address of the chunk holding data.
func Of(data []byte) Addr {
	sum := sha512.Sum512(data)
	var a Addr
	copy(a[:], sum[:Size])
	return a
}

// OfAll sets out[i] to the address of chunks[i], as Of does, hashing several
// chunks at once where the CPU allows (four SHA-512 lanes with AVX2, about
// twice the throughput of Of in a loop for 4 KiB chunks). It panics if out is
// shorter than chunks. Chunks may have any sizes and may share memory.
func OfAll(chunks [][]byte, out []Addr) {
	if len(out) < len(chunks) {
		panic(fmt.Sprintf("addr.OfAll: %d chunks but room for %d addresses", len(chunks), len(out)))
	}
	var buf [64][sha512x4.Size]byte
	for len(chunks) > 0 {
		n := min(len(chunks), len(buf))
		sha512x4.Sums(chunks[:n], buf[:n])
		for i := range n {
			copy(out[i][:], buf[i][:Size])
		}
		chunks, out = chunks[n:], out[n:]
	}
}

// String returns the base32 text form.
func (a Addr) String() string { return encoding.EncodeToString(a[:]) }

// IsEmpty reports whether a is the all-zero address.
func (a Addr) IsEmpty() bool { return a == Empty }

// Prefix returns the first 8 bytes as a big-endian integer.
func (a Addr) Prefix() uint64 { return binary.BigEndian.Uint64(a[:PrefixSize]) }

// Suffix returns the last 12 bytes.
func (a Addr) Suffix() []byte { return a[PrefixSize:] }

// Compare orders addresses like their bytes (and like their text forms).
func (a Addr) Compare(b Addr) int { return bytes.Compare(a[:], b[:]) }

// MarshalText implements encoding.TextMarshaler.
func (a Addr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Addr) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// Parse reads an address from its 32-character base32 text form.
func Parse(s string) (Addr, error) {
	var a Addr
	if len(s) != TextSize {
		return a, fmt.Errorf("parse address %q: want %d characters of 0-9a-v, got %d", clip(s), TextSize, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return a, fmt.Errorf("parse address %q: character %q at position %d is not in 0-9a-v", clip(s), c, i)
		}
	}
	n, err := encoding.Decode(a[:], []byte(s))
	if err != nil || n != Size {
		return a, fmt.Errorf("parse address %q: not valid base32", clip(s))
	}
	// 32 characters carry 160 bits exactly, so any string of the alphabet decodes.
	return a, nil
}

// MustParse is Parse for constants in tests and examples; it panics on error.
func MustParse(s string) Addr {
	a, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return a
}

// FromBytes reads a raw 20-byte address.
func FromBytes(b []byte) (Addr, error) {
	var a Addr
	if len(b) != Size {
		return a, fmt.Errorf("address must be %d bytes, got %d", Size, len(b))
	}
	copy(a[:], b)
	return a, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
