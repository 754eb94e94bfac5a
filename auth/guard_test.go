package auth

import (
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/chunkd/chunkd/internal/imports"
)

// TestBearerToken: the token of an Authorization header, bearer or Basic
// (Dolt's DOLT_REMOTE_PASSWORD with --user).
func TestBearerToken(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":  "abc",
		"bearer  abc": "abc",
		"Basic " + base64.StdEncoding.EncodeToString([]byte("user:tok:en")): "tok:en",
		"Basic " + base64.StdEncoding.EncodeToString([]byte("nopassword")):  "",
		"Basic !!!": "",
		"abc":       "",
		"":          "",
	} {
		if got := BearerToken(h); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestGuardKnowsNoRoute: the guard decides by the rule a route or method
// carries (Need), so it imports nothing that defines the service's routes
// or methods: not the wire formats (api), not any feature's protocol, no
// transport.
func TestGuardKnowsNoRoute(t *testing.T) {
	imports.Refuse(t, "the guard must know no route, method or transport",
		"github.com/chunkd/chunkd", "google.golang.org/grpc", "net/http")
}

// TestCheck: each Need against each token, with metrics open and not.
func TestCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("right db1\nall *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, metricsOpen := range []bool{false, true} {
		g := &Guard{Tokens: tokens, MetricsOpen: metricsOpen, Logger: slog.New(slog.DiscardHandler)}
		for _, c := range []struct {
			need      Need
			token, db string
			want      error
			metrics   bool // open when MetricsOpen
		}{
			{Open, "", "db1", nil, false},
			{AnyToken, "", "", ErrUnauthenticated, false},
			{AnyToken, "right", "", nil, false},
			{DBToken, "right", "db1", nil, false},
			{DBToken, "right", "db2", ErrForbidden, false},
			{DBToken, "all", "db2", nil, false},
			{DBToken, "wr0ng", "db1", ErrUnauthenticated, false},
			{MetricsToken, "", "", ErrUnauthenticated, true},
			{MetricsToken, "right", "", nil, false},
			{needUnset, "all", "db1", ErrForbidden, false}, // no rule: refused to everyone
		} {
			want := c.want
			if c.metrics && metricsOpen {
				want = nil
			}
			if _, err := g.Check(c.need, c.token, c.db, "test", ""); err != want {
				t.Errorf("metrics open %v: %v with token %q for %q: %v, want %v", metricsOpen, c.need, c.token, c.db, err, want)
			}
		}
	}
	var none *Guard
	if g, err := none.Check(DBToken, "", "db1", "test", ""); g != nil || err != nil {
		t.Errorf("a nil guard: %v, %v; want everything let through", g, err)
	}
}
