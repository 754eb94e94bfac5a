package addr

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestKnownAnswer(t *testing.T) {
	// From the Dolt fixtures README: hex and text of the same address.
	b, _ := hex.DecodeString("d2e80fa8d2cbad859d33a2d6575a62a6e14b9fd6")
	a, err := FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.String(), "qbk0va6ipemob79jkbb5emj2krgkn7um"; got != want {
		t.Fatalf("String = %s, want %s", got, want)
	}
	p, err := Parse("qbk0va6ipemob79jkbb5emj2krgkn7um")
	if err != nil || p != a {
		t.Fatalf("Parse = %x, %v; want %x", p, err, a)
	}
	if a.Prefix() != 0xd2e80fa8d2cbad85 {
		t.Fatalf("Prefix = %x", a.Prefix())
	}
}

func TestOf(t *testing.T) {
	a := Of([]byte("hello"))
	// SHA-512("hello") begins 9b71d224bd62f378 5d96d46ad3ea3d73 319bfbc2.
	if got := hex.EncodeToString(a[:]); got != "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2" {
		t.Fatalf("Of(hello) = %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "abc", strings.Repeat("w", 32), strings.Repeat("0", 33), strings.Repeat("A", 32)} {
		_, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", s)
			continue
		}
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Parse(%q) error %q does not name the input", s, err)
		}
	}
}

func TestOrderMatchesText(t *testing.T) {
	x, y := Of([]byte("a")), Of([]byte("b"))
	if (x.Compare(y) < 0) != (x.String() < y.String()) {
		t.Fatal("text order differs from byte order")
	}
}

func TestOfAll(t *testing.T) {
	// More chunks than OfAll hashes in one go, of mixed sizes, some sharing memory.
	big := make([]byte, 70000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var chunks [][]byte
	for i := range 150 {
		switch i % 5 {
		case 0:
			chunks = append(chunks, big[i:i+4096])
		case 1:
			chunks = append(chunks, big[:i*400])
		case 2:
			chunks = append(chunks, nil)
		default:
			chunks = append(chunks, big[i*3:i*3+i])
		}
	}
	out := make([]Addr, len(chunks)+1)
	OfAll(chunks, out)
	for i, c := range chunks {
		if want := Of(c); out[i] != want {
			t.Fatalf("chunk %d (%d bytes): OfAll gave %s, Of gives %s", i, len(c), out[i], want)
		}
	}
	if !out[len(chunks)].IsEmpty() {
		t.Fatalf("OfAll wrote past the last chunk's address")
	}
	OfAll(nil, nil)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("OfAll with 2 chunks and room for 1 address did not panic")
			}
		}()
		OfAll(chunks[:2], out[:1])
	}()
}

// BenchmarkOfAll hashes 256 chunks of 4 KiB (SQLite pages) with Of in a loop
// and with OfAll, side by side.
func BenchmarkOfAll(b *testing.B) {
	chunks := make([][]byte, 256)
	for i := range chunks {
		chunks[i] = make([]byte, 4096)
		for j := range chunks[i] {
			chunks[i][j] = byte(i ^ j*31)
		}
	}
	out := make([]Addr, len(chunks))
	b.Run("Of", func(b *testing.B) {
		b.SetBytes(int64(len(chunks) * 4096))
		for b.Loop() {
			for i, c := range chunks {
				out[i] = Of(c)
			}
		}
	})
	b.Run("OfAll", func(b *testing.B) {
		b.SetBytes(int64(len(chunks) * 4096))
		b.ReportAllocs()
		for b.Loop() {
			OfAll(chunks, out)
		}
	})
}
