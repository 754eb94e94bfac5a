package main

import (
	"crypto/sha512"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/doltfixtures"
)

// The Dolt fixtures the repository carries (testdata/dolt).
var fixtureRoot = doltfixtures.Root()

// exitCode is the exit status of a finished command, 0 for success.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatalf("run chunkd: %v", err)
	}
	return ee.ExitCode()
}

var lsLastLine = regexp.MustCompile(`^chunks=(\d+) uncompressed=(\d+) format=(classic|archive-v[123]) name=([0-9a-v]{32}|-)$`)

// TestTablefileCommands runs "chunkd tablefile ls, get, verify" on every
// Dolt fixture and compares with its known answers (*.chunks.tsv).
func TestTablefileCommands(t *testing.T) {
	for _, file := range doltfixtures.Files(t) {
		name, _ := filepath.Rel(fixtureRoot, file)
		t.Run(name, func(t *testing.T) {
			want := lsLines(t, file)
			out := mustChunkd(t, "tablefile", "ls", file)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			last := lsLastLine.FindStringSubmatch(lines[len(lines)-1])
			if last == nil {
				t.Fatalf("ls last line %q", lines[len(lines)-1])
			}
			got := slices.Sorted(slices.Values(lines[:len(lines)-1]))
			if !slices.Equal(got, want) {
				t.Fatalf("ls lists %d chunks unlike the known answer's %d", len(got), len(want))
			}
			if last[1] != strconv.Itoa(len(want)) {
				t.Fatalf("ls says chunks=%s, want %d", last[1], len(want))
			}
			if strings.HasSuffix(file, ".darc") != strings.HasPrefix(last[3], "archive") {
				t.Fatalf("format=%s for %s", last[3], name)
			}

			// get: the bytes hash to the address, for the first and last chunk.
			for _, line := range []string{want[0], want[len(want)-1]} {
				a := strings.Fields(line)[0]
				data := mustChunkd(t, "tablefile", "get", file, a)
				sum := sha512.Sum512([]byte(data))
				if addr.Addr(sum[:addr.Size]).String() != a {
					t.Fatalf("get %s: bytes hash to another address", a)
				}
			}

			stdout, stderr, err := chunkd(t, "tablefile", "verify", file)
			corrupt := strings.Contains(name, "corrupt") && strings.Contains(name, "oldgen")
			switch code := exitCode(t, err); {
			case corrupt && code != 1:
				t.Fatalf("verify of the corrupt fixture: exit %d\n%s%s", code, stdout, stderr)
			case corrupt && !strings.Contains(stdout, "chunk rlmgv0komq0oj7qu4osdo759vs4c5pvg at offset 3469"):
				t.Fatalf("verify does not name the bad chunk:\n%s", stdout)
			case !corrupt && code != 0:
				t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
			}
		})
	}
}

// lsLines returns a fixture's known chunks as ls prints them, sorted.
func lsLines(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	for _, c := range doltfixtures.Chunks(t, file) {
		out = append(out, fmt.Sprintf("%s %d %d %d", c.Addr, c.Offset, c.Stored, c.Uncompressed))
	}
	slices.Sort(out)
	return out
}

// TestTablefileBadInput: a journal, a truncated file, a bad address and an
// absent chunk are errors that say what is wrong, never a panic.
func TestTablefileBadInput(t *testing.T) {
	classic := filepath.Join(fixtureRoot, "remote-classic", "ksk59qv6p04kqje29kc59n1r1vnjt140")
	b, err := os.ReadFile(classic)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.WriteFile(truncated, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"ls", filepath.Join(fixtureRoot, "db-classic-noms", "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv")}, 1, "chunk journal"},
		{[]string{"verify", truncated}, 1, "truncated"},
		{[]string{"get", classic, "xyz"}, 2, `"xyz"`},
		{[]string{"get", classic, "01bprmorpihnfnu29025rnk4rin732jt"}, 1, "not found"},
		{[]string{"ls", filepath.Join(t.TempDir(), "absent")}, 1, "no such file"},
		{[]string{"frob", classic}, 2, "unknown subcommand"},
	} {
		stdout, stderr, err := chunkd(t, append([]string{"tablefile"}, tc.args...)...)
		if code := exitCode(t, err); code != tc.code || !strings.Contains(stderr, tc.msg) || strings.Contains(stderr, "panic") {
			t.Errorf("tablefile %v: exit %d, stderr %q, stdout %d bytes; want exit %d and %q", tc.args, code, stderr, len(stdout), tc.code, tc.msg)
		}
	}
}
