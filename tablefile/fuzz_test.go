package tablefile

import (
	"bytes"
	"os"
	"testing"
)

// FuzzOpenClassic feeds arbitrary bytes to Open and, when it succeeds, to
// every read. Nothing may panic, and because Open checks every size the
// footer claims against the file's length, allocations stay proportional
// to the input.
func FuzzOpenClassic(f *testing.F) {
	for _, name := range []string{
		"/db-classic-noms/sk239e3qseqmo2fe2e3garrhm8vb36f8",
		"/remote-classic/ug6pcgl6jsjdq3pkerao2jgh2ida6fh7",
		"/repo-testdata/corrupt-bad-commit/noms/oldgen/aa3a08lf6sbtq9cl58mledifrqvt3fid",
		"/db-classic-noms/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv",
	} {
		b, err := os.ReadFile(fixtureRoot + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[len(b)/2:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := Open(bytes.NewReader(b), int64(len(b)), nil)
		if err != nil {
			return
		}
		if tab.MemSize() > 64*len(b)+4096 {
			t.Fatalf("index of %d bytes for a %d-byte file", tab.MemSize(), len(b))
		}
		for _, e := range tab.Entries() {
			if e.End() > uint64(len(b)) {
				t.Fatalf("entry %+v outside a %d-byte file", e, len(b))
			}
			_, _ = tab.Read(e)
			if _, ok := tab.Lookup(e.Addr); !ok {
				t.Fatalf("entry %s not found by Lookup", e.Addr)
			}
		}
		_, _ = tab.Verify("", func(Problem) {})
	})
}
