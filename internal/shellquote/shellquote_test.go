package shellquote

import (
	"os/exec"
	"slices"
	"testing"
)

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sql", "--scale", "small"}, "sql --scale small"},
		{[]string{"--out", "/tmp/a b"}, "--out '/tmp/a b'"},
		{[]string{""}, "''"},
		{[]string{"it's", "$HOME"}, `'it'\''s' '$HOME'`},
		{nil, ""},
	} {
		if got := Join(tc.args); got != tc.want {
			t.Errorf("Join(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestJoinRoundTrip: the shell splits a joined line back into the same
// arguments.
func TestJoinRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	args := []string{"plain", "a b", "it's", `back\slash`, "$x`y`", "", "*", "new\nline"}
	out, err := exec.Command(sh, "-c", `for a in `+Join(args)+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(out) > 0 {
		i := slices.Index(out, 0)
		got = append(got, string(out[:i]))
		out = out[i+1:]
	}
	if !slices.Equal(got, args) {
		t.Errorf("sh split %q into %q", Join(args), got)
	}
}
