package main

import (
	"regexp"
	"strings"
	"testing"
)

var demoRow = regexp.MustCompile(`(?m)^(local file|object store directly|cache service, cold|cache service, warm|service's files, same host)\s+\S+\s+(\d+) rows$`)

// TestDemo runs the README's first command, small: every path answers
// the seed's query with the rows the local file gives, and the side-by-side
// table is printed.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	out := mustChunkd(t, "demo", "--dir", dir, "--sentences", "12000", "--translations", "24000", "--rtt", "2ms")
	rows := demoRow.FindAllStringSubmatch(out, -1)
	if len(rows) != 5 {
		t.Fatalf("demo printed %d of 5 paths:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r[2] != rows[0][2] || r[2] == "0" {
			t.Fatalf("%s: %s rows, local file %s:\n%s", r[1], r[2], rows[0][2], out)
		}
	}
	// One table of where the chunks came from, in one unit per column,
	// every column explained (hedged included).
	for _, want := range []string{"vs local", "store round trip 2ms", "1.00x",
		"path                           memory  service (cached)  (store)    files    store store MiB   hedged",
		"\n  hedged     chunks the service had not sent within 50 ms"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoRefusesArguments(t *testing.T) {
	_, errOut, err := chunkd(t, "demo", "extra")
	if exitCode(t, err) != 2 || !strings.Contains(errOut, `unexpected arguments ["extra"]`) {
		t.Fatalf("demo extra: %v %q", err, errOut)
	}
}
