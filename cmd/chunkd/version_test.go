package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	out := mustChunkd(t, "version")
	for _, want := range []string{"chunkd ", "\ncommit  ", "\ngo      " + runtime.Version(), "\nsqlite  3."} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	if again := mustChunkd(t, "--version"); again != out {
		t.Errorf("--version differs from version:\n%s\n%s", again, out)
	}
}

// TestLogFormat: the client's warnings come through the same logger as
// every command's, in the format --log-format asks for.
func TestLogFormat(t *testing.T) {
	_, storeURL := smallDB(t)
	args := []string{"sql", "--store", storeURL, "--db", "s", "--service", "http://127.0.0.1:1", "-q", "SELECT count(*) FROM sentences"}

	_, errOut, err := chunkd(t, append(args, "--log-format", "json")...)
	if err != nil {
		t.Fatal(err, errOut)
	}
	warned := false
	for _, line := range strings.Split(errOut, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if rec["level"] == "WARN" && strings.Contains(rec["msg"].(string), "cache service unreachable") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no JSON warning about the unreachable service:\n%s", errOut)
	}
	_, errOut, _ = chunkd(t, args...)
	if !strings.Contains(errOut, `level=WARN msg="cache service unreachable`) {
		t.Fatalf("text warning not in the service's format:\n%s", errOut)
	}
	_, errOut, err = chunkd(t, append(args, "--log-format", "xml")...)
	if err == nil || !strings.Contains(errOut, "--log-format must be text or json") {
		t.Fatalf("bad --log-format: %v %s", err, errOut)
	}
}
