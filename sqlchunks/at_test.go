//go:build cgo

package sqlchunks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
)

func TestParseAt(t *testing.T) {
	root := "0123456789abcdefghijklmnopqrstuv"
	for _, tc := range []struct {
		in   string
		want string // At.String(), or "error"
	}{
		{"", ""},
		{root, root},
		{"00000000000000000000000000000000", "00000000000000000000000000000000"},
		{"2026-11-28T10:00:00Z", "2026-11-28T10:00:00Z"},
		{"2026-11-28T11:00:00+01:00", "2026-11-28T11:00:00+01:00"},
		{"2026-11-28T10:00:00", "2026-11-28T10:00:00Z"},
		{"2026-11-28", "2026-11-28T00:00:00Z"},
		{"yesterday", "error"},
		{"0123456789abcdefghijklmnopqrstuw", "error"}, // w is no base32 digit
		{"0123", "error"},
	} {
		at, err := ParseAt(tc.in)
		switch {
		case tc.want == "error":
			if err == nil || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseAt(%q) = %v, %v; want an error naming it", tc.in, at, err)
			}
		case err != nil || at.String() != tc.want:
			t.Errorf("ParseAt(%q) = %q, %v; want %q", tc.in, at.String(), err, tc.want)
		}
	}
}

// TestResolveAt: a time gives the newest version at or before it; the
// all-zero root and a time before the first version are "no such
// version", naming what was asked for.
func TestResolveAt(t *testing.T) {
	ctx := context.Background()
	s := newFolder(t)
	path := genDB(t, 21)
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var roots []addr.Addr
	for i := range 3 {
		changePages(t, path, 2, i)
		r := importFile(t, s, path, ImportOptions{DB: "at", now: func() time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }})
		roots = append(roots, r.Root)
	}
	c := newClient(t, s, "at", "")
	for _, tc := range []struct {
		at   string
		want int // index in roots; -1 for the head (zero root)
	}{
		{"", -1},
		{"2026-11-28T10:00:00Z", 0},
		{"2026-11-28T10:00:09Z", 0},
		{"2026-11-28T10:00:10Z", 1},
		{"2026-11-28T11:00:15+01:00", 1},
		{"2026-11-28T10:00:20Z", 2},
		{"2027-01-01", 2},
		{roots[1].String(), 1},
	} {
		at, err := ParseAt(tc.at)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(ctx, c, at)
		want := addr.Addr{}
		if tc.want >= 0 {
			want = roots[tc.want]
		}
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", tc.at, got, err, want)
		}
	}
	for _, tc := range []struct{ at, msg string }{
		{"00000000000000000000000000000000", `no such version 00000000000000000000000000000000 of database "at"`},
		{"2026-11-28T09:59:59Z", fmt.Sprintf(`no such version at or before 2026-11-28T09:59:59Z in database "at": its first version, %s, was made at 2026-11-28T10:00:00Z`, roots[0])},
	} {
		at, err := ParseAt(tc.at)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Resolve(ctx, c, at)
		if !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Resolve(%s): %v; want ErrNoVersion, %q", tc.at, err, tc.msg)
		}
	}
}
