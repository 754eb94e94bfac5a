package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// reportOnly are import-path prefixes of the benchmark reports' code
// (plots, their fonts, LaTeX, PDF, SVG and image encoders) that chunkd,
// the binary an operator deploys, must not link.
var reportOnly = []string{
	"github.com/chunkd/chunkd/bench",
	"gonum.org/v1/plot",
	"codeberg.org/go-latex/",
	"codeberg.org/go-pdf/",
	"codeberg.org/go-fonts/",
	"git.sr.ht/~sbinet/gg",
	"github.com/golang/freetype",
	"github.com/ajstarks/svgo",
	"golang.org/x/image/",
}

// TestLinksNoReportCode: go list -deps of this command names none of the
// packages above (it named 38 of them while chunkd ran the benchmarks).
func TestLinksNoReportCode(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot list the command's dependencies")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, p := range reportOnly {
			if d == strings.TrimSuffix(p, "/") || strings.HasPrefix(d, strings.TrimSuffix(p, "/")+"/") {
				t.Errorf("chunkd links %s (report code belongs to cmd/chunkd-bench)", d)
			}
		}
	}
}

// TestBenchMoved: "chunkd bench ..." is not a command any more, and says
// the exact command that runs the suite now; "chunkd help" does not list
// it.
func TestBenchMoved(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"bench", "sql", "--scale", "small", "--out", "/tmp/a b"}, &stdout, &stderr)
	if code != 2 {
		t.Errorf("chunkd bench exited %d, want 2", code)
	}
	if want := "go run ./cmd/chunkd-bench sql --scale small --out '/tmp/a b'\n"; !strings.Contains(stderr.String(), want) {
		t.Errorf("chunkd bench printed %q, want it to name %q", stderr.String(), want)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("chunkd help exited %d", code)
	}
	if strings.Contains(stderr.String(), "bench") {
		t.Errorf("chunkd help lists bench:\n%s", stderr.String())
	}
}
