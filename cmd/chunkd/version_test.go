package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
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

// jsonRecords parses every line of out as a JSON log record.
func jsonRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log record: %v: %q\n%s", err, line, out)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestJSONLogs: with --log-format json everything on stderr is a JSON
// record, chunkd sql's summary and a command's error included, and a
// duration is written as text logs write it ("took":"3ms"), never bare
// nanoseconds.
func TestJSONLogs(t *testing.T) {
	file, storeDir := smallDB(t)
	_, errOut, err := chunkd(t, "sql", "--file", file, "-q", "SELECT count(*) FROM sentences", "--log-format", "json")
	if err != nil {
		t.Fatal(err, errOut)
	}
	recs := jsonRecords(t, errOut)
	if len(recs) != 1 || recs[0]["msg"] != "query done" || recs[0]["rows"] != 1.0 {
		t.Fatalf("summary: %s", errOut)
	}
	if d, ok := recs[0]["took"].(string); !ok || !strings.HasSuffix(d, "s") {
		t.Errorf("took: %v", recs[0]["took"])
	}
	_, errOut, err = chunkd(t, "sql", "--file", file, "-q", "SELECT nosuch FROM sentences", "--log-format", "json")
	recs = jsonRecords(t, errOut)
	if exitCode(t, err) != 1 || len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["command"] != "sql" || !strings.Contains(recs[0]["msg"].(string), "no such column: nosuch") {
		t.Errorf("error: %v %s", err, errOut)
	}
	_, errOut, err = chunkd(t, "sql", "--file", file, "--log-format", "json")
	recs = jsonRecords(t, errOut)
	if exitCode(t, err) != 2 || len(recs) != 1 || recs[0]["msg"] != "-q is required" {
		t.Errorf("usage error: %v %s", err, errOut)
	}

	// The service's logs: every duration as text.
	cmd := exec.Command(binary, "serve", "--store", storeDir, "--cache-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--grpc-listen", "", "--log-format", "json")
	logs := newWatch(0)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `"msg":"listening"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	durations := 0
	for _, rec := range jsonRecords(t, logs.String()) {
		if took, ok := rec["took"]; ok {
			durations++
			if s, ok := took.(string); !ok {
				t.Errorf("%q: took %v, not a duration's text", rec["msg"], took)
			} else if _, err := time.ParseDuration(s); err != nil {
				t.Errorf("%q: took %q: %v", rec["msg"], s, err)
			}
		}
	}
	if durations == 0 {
		t.Fatalf("no record with a duration:\n%s", logs)
	}
}
