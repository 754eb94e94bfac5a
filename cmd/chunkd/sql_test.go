package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/internal/killedwriter"
)

// chunkd runs the built binary and returns stdout, stderr and the error.
func chunkd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return chunkdEnv(t, nil, args...)
}

// chunkdEnv runs the built binary with extra environment variables.
func chunkdEnv(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// mustChunkdErr is mustChunkd that returns stderr too.
func mustChunkdErr(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, errOut, err := chunkd(t, args...)
	if err != nil {
		t.Fatalf("chunkd %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out, errOut
}

func mustChunkd(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := chunkd(t, args...)
	if err != nil {
		t.Fatalf("chunkd %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

var versionLine = regexp.MustCompile(`version ([0-9a-v]{32})`)

// TestSQLCommands publishes two versions of a generated database and
// checks that every read path gives the same answers as the local file.
func TestSQLCommands(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "v1.sqlite"), filepath.Join(dir, "v2.sqlite")
	mustChunkd(t, "gen", "sentences", "--out", v1, "--sentences", "20000", "--translations", "40000", "--seed", "1")
	mustChunkd(t, "gen", "sentences", "--out", v2, "--sentences", "20000", "--translations", "40000", "--seed", "2")
	storeURL := filepath.Join(dir, "store")

	out := mustChunkd(t, "import", "--store", storeURL, "--db", "s", "--message", "first", v1)
	root1 := versionLine.FindStringSubmatch(out)
	if root1 == nil {
		t.Fatalf("import printed no version:\n%s", out)
	}
	mustChunkd(t, "import", "--store", storeURL, "--db", "s", v2, "--message", "second") // flags after the file, as the issue writes it
	log := mustChunkd(t, "log", "--store", storeURL, "--db", "s")
	if strings.Count(log, "version ") != 2 || !strings.Contains(log, "first") || !strings.Contains(log, "second") {
		t.Fatalf("log:\n%s", log)
	}

	queries := []string{
		"SELECT Text FROM translations JOIN sentences ON translations.TranslationId = sentences.SentenceId WHERE translations.SentenceID % 5000 = 0",
		"SELECT Lang, count(*), sum(length(Text)) FROM sentences GROUP BY Lang ORDER BY Lang",
		"SELECT SentenceId, length(Text) FROM sentences ORDER BY length(Text) DESC, SentenceId LIMIT 5",
	}
	cacheDir := t.TempDir()
	svc := startService(t, storeURL, cacheDir)
	for _, q := range queries {
		want := mustChunkd(t, "sql", "--file", v2, "-q", q, "--format", "csv")
		if strings.Count(want, "\n") < 2 {
			t.Fatalf("query %q returned nothing on the local file", q)
		}
		for _, extra := range [][]string{nil, {"--service", svc.http}, {"--service", "grpc://" + svc.grpcAddr}, {"--service", svc.http, "--service-dir", cacheDir}} {
			args := append([]string{"sql", "--store", storeURL, "--db", "s", "-q", q, "--format", "csv"}, extra...)
			if got := mustChunkd(t, args...); got != want {
				t.Fatalf("%v: results differ from the local file", extra)
			}
		}
		// Through the service alone (no store), latest and --at, fresh or not.
		for _, extra := range [][]string{nil, {"--fresh"}, {"--service-dir", cacheDir}} {
			args := append([]string{"sql", "--service", svc.http, "--db", "s", "-q", q, "--format", "csv"}, extra...)
			if got := mustChunkd(t, args...); got != want {
				t.Fatalf("--service without --store %v: results differ from the local file", extra)
			}
		}
		old := mustChunkd(t, "sql", "--file", v1, "-q", q, "--format", "csv")
		if got := mustChunkd(t, "sql", "--service", svc.http, "--db", "s", "--at", root1[1], "-q", q, "--format", "csv"); got != old {
			t.Fatalf("--service without --store, --at the first version: results differ from v1")
		}
		if got := mustChunkd(t, "sql", "--store", storeURL, "--db", "s", "--at", root1[1], "-q", q, "--format", "csv"); got != old {
			t.Fatalf("--at the first version: results differ from v1")
		}
		// On the service (its query API), printed as the local path prints.
		for _, format := range []string{"csv", "table", "json"} {
			local := mustChunkd(t, "sql", "--file", v2, "-q", q, "--format", format)
			if got := mustChunkd(t, "sql", "--service", svc.http, "--db", "s", "--remote", "-q", q, "--format", format); got != local {
				t.Fatalf("--remote, format %s: results differ from the local file:\n%s\nwant:\n%s", format, got, local)
			}
		}
		if got := mustChunkd(t, "sql", "--service", svc.http, "--db", "s", "--remote", "--at", root1[1], "-q", q, "--format", "csv"); got != old {
			t.Fatalf("--remote --at the first version: results differ from v1")
		}
	}
	_, errOut, err := chunkd(t, "sql", "--service", svc.http, "--db", "s", "--remote", "-q", "SELECT 1; DELETE FROM sentences")
	if err == nil || !strings.Contains(errOut, "statement 2 of 2") || !strings.Contains(errOut, "403") || !strings.Contains(errOut, "not authorized: DELETE sentences") {
		t.Fatalf("--remote, a write: err %v, %s", err, errOut)
	}
	// A statement that fails after its answer began (past the 64 KiB the
	// service holds the status for): the rows before the failure are
	// printed (a header and 4,999), as the local path prints them, then the
	// error.
	failing := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5000) " +
		"SELECT x, printf('%040d', x) FROM c WHERE CASE WHEN x = 5000 THEN abs(-9223372036854775807 - 1) ELSE 1 END"
	localOut, localErr, err1 := chunkd(t, "sql", "--file", v2, "-q", failing, "--format", "csv")
	remoteOut, remoteErr, err2 := chunkd(t, "sql", "--service", svc.http, "--db", "s", "--remote", "-q", failing, "--format", "csv")
	if err1 == nil || err2 == nil || strings.Count(localOut, "\n") != 5000 || remoteOut != localOut || !strings.Contains(remoteErr, "integer overflow") {
		t.Fatalf("a statement failing mid-answer: local %v, %d lines, %s; remote %v, %d lines, %s", err1, strings.Count(localOut, "\n"), localErr, err2, strings.Count(remoteOut, "\n"), remoteErr)
	}
	out, errOut = mustChunkdErr(t, "sql", "--service", svc.http, "--db", "s", "--remote", "-q", "SELECT 1 AS one")
	if out != "one\n1\n" || !strings.Contains(errOut, "1 rows in") && !strings.Contains(errOut, "1 row in") || !strings.Contains(errOut, "result cache") {
		t.Fatalf("--remote: %q, %q", out, errOut)
	}
	for _, format := range []string{"table", "json"} {
		if out := mustChunkd(t, "sql", "--store", storeURL, "--db", "s", "-q", "SELECT 1 AS one", "--format", format); !strings.Contains(out, "one") {
			t.Fatalf("format %s: %q", format, out)
		}
	}
	_, errOut, err = chunkd(t, "sql", "--store", storeURL, "--db", "s", "-q", "DELETE FROM sentences")
	if err == nil || !strings.Contains(errOut, "readonly") {
		t.Fatalf("write: err %v, %s", err, errOut)
	}
	_, errOut, err = chunkd(t, "import", "--store", storeURL, "--db", "s", filepath.Join(dir, "missing.sqlite"))
	if err == nil || !strings.Contains(errOut, "missing.sqlite") {
		t.Fatalf("import of a missing file: %v %s", err, errOut)
	}
	_, errOut, err = chunkd(t, "sql", "--store", storeURL, "--db", "nosuch", "-q", "SELECT 1")
	if err == nil || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("unknown database: %v %s", err, errOut)
	}
	svc.stop()
}

// TestSQLFileRefusesUnfinishedWrites: "chunkd sql --file" reads the file
// alone, so a file whose writer died with an uncheckpointed -wal, or
// mid-transaction with a hot -journal, is refused, naming the file, where
// reading it would answer wrongly ("no such table", or rows of the dead
// transaction).
func TestSQLFileRefusesUnfinishedWrites(t *testing.T) {
	for _, c := range []struct{ kind, side string }{
		{killedwriter.WAL, "-wal"},
		{killedwriter.HotJournal, "-journal"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "left.sqlite")
			killedwriter.Leave(t, path, c.kind)
			out, errOut, err := chunkd(t, "sql", "--file", path, "-q", "SELECT count(*) FROM t")
			if exitCode(t, err) == 0 || out != "" {
				t.Fatalf("exit code 0 (or output %q) for a file with a %s left by a killed writer", out, c.side)
			}
			if !strings.Contains(errOut, path) || !strings.Contains(errOut, "left.sqlite"+c.side) {
				t.Fatalf("error %q does not name %s and its %s", errOut, path, c.side)
			}
		})
	}
}
