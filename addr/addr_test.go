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
