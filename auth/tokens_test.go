package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAndLookup(t *testing.T) {
	s, err := Parse(strings.NewReader(`
# comment line
t0k3n  sales-* inventory   # trailing comment
	all-of-them	*
digits db-[0-9]
`), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("Len %d, want 3", s.Len())
	}
	for _, tc := range []struct {
		token, db string
		known     bool
		allowed   bool
	}{
		{"t0k3n", "sales-eu", true, true},
		{"t0k3n", "sales-", true, true},
		{"t0k3n", "inventory", true, true},
		{"t0k3n", "inventory2", true, false},
		{"t0k3n", "presales-eu", true, false},
		{"all-of-them", "anything", true, true},
		{"digits", "db-7", true, true},
		{"digits", "db-77", true, false},
		{"t0k3", "sales-eu", false, false},
		{"t0k3n ", "sales-eu", false, false},
		{"", "sales-eu", false, false},
		{"#", "sales-eu", false, false},
	} {
		g, ok := s.Lookup(tc.token)
		if ok != tc.known {
			t.Errorf("Lookup(%q) known %v, want %v", tc.token, ok, tc.known)
			continue
		}
		if ok && g.Allows(tc.db) != tc.allowed {
			t.Errorf("token %q, db %q: allowed %v, want %v", tc.token, tc.db, !tc.allowed, tc.allowed)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"lonely\n", "tokens:1: a token without databases"},
		{"a db\n\nb x[\n", `tokens:3: bad database pattern "x["`},
		{"a db1\nb db2\na db3\n", "tokens:3: the token of line 1 again"},
	} {
		_, err := Parse(strings.NewReader(tc.text), "tokens")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.text, err, tc.want)
		}
		// Errors name lines, never the token.
		if err != nil && strings.Contains(err.Error(), "lonely") {
			t.Errorf("error shows the token: %v", err)
		}
	}
}

func TestFileReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old db\n")
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup("old"); !ok {
		t.Fatal("old token unknown")
	}
	write("new db\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup("old"); ok {
		t.Fatal("old token still known after reload")
	}
	if _, ok := f.Lookup("new"); !ok {
		t.Fatal("new token unknown after reload")
	}
	// A broken file keeps the tokens in force.
	write("new\n")
	if err := f.Reload(); err == nil {
		t.Fatal("broken file reloaded")
	}
	if _, ok := f.Lookup("new"); !ok {
		t.Fatal("a failed reload dropped the tokens in force")
	}
	write("# nobody\n")
	if err := f.Reload(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty file: %v, want ErrEmpty", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file loaded")
	}
}
