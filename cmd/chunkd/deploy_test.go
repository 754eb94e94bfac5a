package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unitLines returns the values of key in the unit file, in order.
func unitLines(t *testing.T, unit, key string) []string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vals []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// TestSystemdUnit checks deploy/chunkd.service with systemd-analyze
// verify. The unit names /usr/local/bin/chunkd, which verify requires to
// exist, so a copy pointing at the binary built for these tests is
// verified; the original must fail for that reason alone, and a copy with
// a misspelt directive must fail too, which shows that verify reads the
// file rather than passing anything.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed on this machine")
	}
	unit := filepath.Join("..", "..", "deploy", "chunkd.service")
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	verify := func(name, body string) (string, error) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
		return string(out), err
	}
	built := strings.ReplaceAll(string(text), "/usr/local/bin/chunkd", binary)
	if out, err := verify("chunkd.service", built); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if _, err := os.Stat("/usr/local/bin/chunkd"); err != nil {
		if out, err := verify("chunkd.service", string(text)); err == nil || !strings.Contains(out, "/usr/local/bin/chunkd") {
			t.Errorf("the unit as shipped, without /usr/local/bin/chunkd: %v\n%s", err, out)
		}
	}
	if out, _ := verify("chunkd.service", strings.Replace(built, "Restart=on-failure", "Restrat=on-failure", 1)); !strings.Contains(out, "Restrat") {
		t.Errorf("a misspelt directive passed verify:\n%s", out)
	}

	// The unit's commands run: serve with the unit's environment parses
	// its settings, and the readiness probe succeeds against a running
	// service and fails without one.
	env := unitLines(t, unit, "Environment")
	cfg := filepath.Join(dir, "chunkd.yaml")
	if err := os.WriteFile(cfg, []byte("store: "+filepath.Join(dir, "store")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, e := range env {
		if strings.HasPrefix(e, "CHUNKD_CONFIG=") {
			env[i] = "CHUNKD_CONFIG=" + cfg
		}
	}
	start := unitLines(t, unit, "ExecStart")
	if len(start) != 1 {
		t.Fatalf("ExecStart lines: %q", start)
	}
	args := append(strings.Fields(start[0])[1:], "--print-config")
	out, errOut, err := chunkdEnv(t, env, args...)
	if err != nil || !regexp.MustCompile(`cache-dir: /var/lib/chunkd +# env CHUNKD_CACHE_DIR`).MatchString(out) || !strings.Contains(out, "# file") {
		t.Fatalf("the unit's serve: %v\n%s%s", err, out, errOut)
	}

	post := unitLines(t, unit, "ExecStartPost")
	if len(post) != 1 || !strings.Contains(post[0], "--service http://127.0.0.1:9460") {
		t.Fatalf("ExecStartPost lines: %q", post)
	}
	svc := startService(t, filepath.Join(dir, "store"), t.TempDir())
	probe := strings.Fields(strings.Replace(post[0], "http://127.0.0.1:9460", svc.http, 1))[1:]
	if out, errOut, err := chunkd(t, probe...); err != nil || !strings.Contains(out, "is ready") {
		t.Fatalf("readiness probe: %v\n%s%s", err, out, errOut)
	}
	svc.stop()
	probe = strings.Fields(strings.Replace(strings.Replace(post[0], "http://127.0.0.1:9460", svc.http, 1), "--wait 60s", "--wait 1s", 1))[1:]
	if _, errOut, err := chunkd(t, probe...); err == nil || !strings.Contains(errOut, "not ready") {
		t.Fatalf("readiness probe of a stopped service: %v %s", err, errOut)
	}
}
