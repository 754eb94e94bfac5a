package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
)

// smallDB makes a small SQLite file and imports it as database "s" into a
// folder store; it returns the file and the store's path.
func smallDB(t *testing.T) (file, storeDir string) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "s.sqlite")
	mustChunkd(t, "gen", "sentences", "--out", file, "--sentences", "300", "--translations", "300", "--seed", "1")
	storeDir = filepath.Join(dir, "store")
	out := mustChunkd(t, "import", "--store", storeDir, "--db", "s", file)
	// The summary names the database and the store apart, so a store URL
	// with parameters is not run into the name (s3://b/p?endpoint=…/shop).
	if !strings.Contains(out, `as database "s" in file://`+storeDir+",") {
		t.Fatalf("import summary: %s", out)
	}
	return file, storeDir
}

// TestReadOnlyCommandsCreateNothing: a mistyped folder store is reported
// as missing, and no folder is made for it.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	_, storeDir := smallDB(t)
	typo := storeDir + "x"
	for _, args := range [][]string{
		{"log", "--store", typo, "--db", "s"},
		{"sql", "--store", typo, "--db", "s", "-q", "SELECT 1"},
	} {
		_, errOut, err := chunkd(t, args...)
		if err == nil || !strings.Contains(errOut, "store folder "+typo+" does not exist") {
			t.Errorf("%s on a missing folder: %v %q", args[0], err, errOut)
		}
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Fatalf("a read-only command made the folder %s: %v", typo, err)
	}
}

// TestPlainPathParameters: a folder path takes latency= like a URL, and
// refuses parameters it does not know, rather than naming a folder after
// them.
func TestPlainPathParameters(t *testing.T) {
	_, storeDir := smallDB(t)
	out := mustChunkd(t, "log", "--store", storeDir+"?latency=1ms", "--db", "s")
	if !strings.Contains(out, "version ") {
		t.Fatalf("log through latency=: %s", out)
	}
	_, errOut, err := chunkd(t, "log", "--store", storeDir+"?latncy=1ms", "--db", "s")
	if err == nil || !strings.Contains(errOut, `unknown parameters "latncy=1ms"`) {
		t.Fatalf("unknown parameter: %v %q", err, errOut)
	}
	entries, _ := os.ReadDir(filepath.Dir(storeDir))
	for _, e := range entries {
		if strings.Contains(e.Name(), "?") {
			t.Fatalf("made a folder named %q", e.Name())
		}
	}
}

// TestBadFlagValueOnce: a bad flag value is said once, with a pointer to
// -h, not twice around the whole usage.
func TestBadFlagValueOnce(t *testing.T) {
	_, errOut, err := chunkd(t, "serve", "--mem", "lots", "--store", t.TempDir(), "--cache-dir", t.TempDir())
	if exitCode(t, err) != 2 || strings.Count(errOut, `"lots"`) != 1 || strings.Contains(errOut, "Usage:") || !strings.Contains(errOut, "Run 'chunkd serve -h'") {
		t.Fatalf("bad flag value: %q", errOut)
	}
	_, errOut, err = chunkd(t, "log", "-h")
	if exitCode(t, err) != 0 || !strings.Contains(errOut, "Usage: chunkd log") {
		t.Fatalf("-h: %v %q", err, errOut)
	}
}

// TestServeMissingStoreWarns: serve on a store folder that does not exist
// starts, warns, and creates nothing; a wrong method is 405.
func TestServeMissingStoreWarns(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nosuch")
	svc := startService(t, missing, t.TempDir())
	if !strings.Contains(svc.log(), "the store does not exist") {
		t.Fatalf("no warning for a missing store folder:\n%s", svc.log())
	}
	req, _ := http.NewRequest(http.MethodDelete, svc.http+"/v1/dbs/s", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error string }
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "GET") || json.Unmarshal(body, &e) != nil || e.Error == "" {
		t.Fatalf("DELETE /v1/dbs/s: %d, Allow %q, body %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
	// A database of a store that is not there is unreachable (503), not
	// unknown (404, which a client would read as "absent"), and the
	// service says it is degraded.
	if code, _, _ := svc.get("db1", addr.Of([]byte("x"))); code != http.StatusServiceUnavailable {
		t.Errorf("a chunk of a database of the missing store: %d, want 503", code)
	}
	if resp, err := http.Get(svc.http + "/readyz"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "degraded") || !strings.Contains(string(b), "does not exist") {
			t.Errorf("/readyz with the store missing: %s", b)
		}
	}
	svc.stop()
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("serve made the store folder: %v", err)
	}
}

// TestStalledStoreSaysHowLong: a store that accepts connections and never
// answers is reported with how long the command waited in all.
func TestStalledStoreSaysHowLong(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	env := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=testtest", "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1"}
	start := time.Now()
	_, errOut, err := chunkdEnv(t, env, "log", "--store", "s3://bucket/p?endpoint=http://"+lis.Addr().String()+"&timeout=1s&retries=0", "--db", "s")
	if err == nil || !strings.Contains(errOut, "no answer within 1s") || !strings.Contains(errOut, "(gave up after ") {
		t.Fatalf("stalled store: %v %q", err, errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("took %v", took)
	}
}

// TestSQLFileNotSQLite: sql --file says what import says of a file that
// is not a database.
func TestSQLFileNotSQLite(t *testing.T) {
	dir := t.TempDir()
	text, empty := filepath.Join(dir, "notsqlite.txt"), filepath.Join(dir, "empty.txt")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	os.WriteFile(empty, nil, 0o644)
	for file, want := range map[string]string{text: "is not an SQLite database (it does not start with the header", empty: "is empty, not an SQLite database"} {
		_, sqlErr, err1 := chunkd(t, "sql", "--file", file, "-q", "SELECT 1")
		_, impErr, err2 := chunkd(t, "import", "--store", filepath.Join(dir, "store"), "--db", "x", file)
		if err1 == nil || err2 == nil || !strings.Contains(sqlErr, file+" "+want) || !strings.Contains(impErr, file+" "+want) {
			t.Errorf("%s:\n sql:    %q\n import: %q\nwant both to say %q", filepath.Base(file), sqlErr, impErr, want)
		}
	}
}

// TestTruncatedTableFileHint: a table file missing bytes before its index
// says it may be truncated.
func TestTruncatedTableFileHint(t *testing.T) {
	for _, name := range []string{"remote-classic/ksk59qv6p04kqje29kc59n1r1vnjt140", "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc"} {
		b, err := os.ReadFile(filepath.Join(fixtureRoot, name))
		if err != nil {
			t.Fatal(err)
		}
		cut := filepath.Join(t.TempDir(), filepath.Base(name))
		os.WriteFile(cut, b[100:], 0o644) // the first 100 bytes lost
		_, errOut, err := chunkd(t, "tablefile", "verify", cut)
		if err == nil || !strings.Contains(errOut, "100 bytes of") || !strings.Contains(errOut, "(truncated?)") {
			t.Errorf("%s without its first 100 bytes: %q", name, errOut)
		}
	}
}

// TestSQLStatementsAndFormats: every statement of -q runs and prints;
// CSV writes NULL as an empty field and REALs with their ".0"; JSON
// writes a BLOB in a form no text takes.
func TestSQLStatementsAndFormats(t *testing.T) {
	file, _ := smallDB(t)
	q := "SELECT 1 AS a; SELECT 'x;y' AS b, NULL AS n, 2.0 AS r, x'00ff' AS blob, 'text' AS t"
	out := mustChunkd(t, "sql", "--file", file, "-q", q, "--format", "csv")
	if want := "a\n1\nb,n,r,blob,t\nx;y,,2.0,\"x'00ff'\",text\n"; out != want {
		t.Errorf("csv:\n%s\nwant\n%s", out, want)
	}
	out = mustChunkd(t, "sql", "--file", file, "-q", q, "--format", "json")
	if want := "[\n{\"a\":1}\n]\n[\n{\"b\":\"x;y\",\"n\":null,\"r\":2.0,\"blob\":{\"blob\":\"00ff\"},\"t\":\"text\"}\n]\n"; out != want {
		t.Errorf("json:\n%s\nwant\n%s", out, want)
	}
	out = mustChunkd(t, "sql", "--file", file, "-q", q)
	if !strings.Contains(out, "a\n1\n\nb") {
		t.Errorf("table:\n%s", out)
	}
	// A count of one is singular.
	if _, errOut, err := chunkd(t, "sql", "--file", file, "-q", "SELECT 1"); err != nil || !strings.HasPrefix(errOut, "1 row in ") {
		t.Errorf("summary of one row: %v %q", err, errOut)
	}
	_, errOut, err := chunkd(t, "sql", "--file", file, "-q", "SELECT 1; SELECT nosuch FROM sentences")
	if err == nil || !strings.Contains(errOut, "statement 2 of 2") {
		t.Errorf("failing second statement: %v %q", err, errOut)
	}
	_, errOut, err = chunkd(t, "sql", "--file", file, "-q", " ; -- nothing")
	if exitCode(t, err) != 2 || !strings.Contains(errOut, "no SQL statement") {
		t.Errorf("empty query: %v %q", err, errOut)
	}
}

// TestStatus: chunkd status shows the service's cache and databases.
func TestStatus(t *testing.T) {
	_, storeDir := smallDB(t)
	svc := startService(t, storeDir, t.TempDir())
	out := mustChunkd(t, "status", "--service", svc.http)
	if !strings.Contains(out, "(ready)") || !strings.Contains(out, "no databases yet") {
		t.Fatalf("status before any read:\n%s", out)
	}
	mustChunkd(t, "sql", "--store", storeDir, "--db", "s", "--service", svc.http, "-q", "SELECT count(*) FROM sentences")
	out = mustChunkd(t, "status", "--service", svc.http)
	for _, want := range []string{"memory    ", " of 256 MiB", "disk      ", " of 10 GiB", "served    ", "hit ratio", "store     ", "\ns         loaded  "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	svc.stop()
	if _, errOut, err := chunkd(t, "status", "--service", svc.http); err == nil || errOut == "" {
		t.Errorf("status of a stopped service: %v %q", err, errOut)
	}
}

// TestSQLCSVAsSQLite3: --format csv writes what sqlite3 -csv -header
// writes for the same query: an empty TEXT or BLOB as "", NULL as an
// empty field, and the same quoting (every ASCII character tried). The
// two differ where docs/sql.md says: a REAL that needs more than 15
// significant digits, and a BLOB that is not UTF-8.
func TestSQLCSVAsSQLite3(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("the sqlite3 shell is not on this machine")
	}
	file := filepath.Join(t.TempDir(), "values.sqlite")
	var chars []string
	for c := 1; c < 128; c++ {
		chars = append(chars, fmt.Sprintf("(%d, char(%d), 'a' || char(%d) || 'b')", c, c, c))
	}
	setup := "CREATE TABLE v(i INTEGER, r REAL, t TEXT, b BLOB, n);" +
		"INSERT INTO v VALUES (1, 2.0, '', x'', NULL), (-7, 0.5, 'a', x'41', NULL), (0, 1e20, 'it''s', x'', 'x'), (3, -1.5e-5, 'é', NULL, 12)," +
		"(4, 1234.5, 'hello world', x'2c', ''), (5, 3.0e300, 'a,b', x'22', '\"q\"');" +
		"CREATE TABLE c(code, ch, mid); INSERT INTO c VALUES " + strings.Join(chars, ",") + ";" +
		// Declared types a driver might read as times and booleans: the
		// values print as stored, as the shell prints them.
		"CREATE TABLE d(d DATE, dt DATETIME, ts TIMESTAMP, b BOOLEAN); INSERT INTO d VALUES ('not a date', '2026-11-28 10:00:00', 1700000000, 2), (NULL, 'x', '', 0);"
	if out, err := exec.Command("sqlite3", file, setup).CombinedOutput(); err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	for _, q := range []string{
		"SELECT '' AS e, NULL AS n, x'' AS b, 'a' AS a",
		"SELECT * FROM v ORDER BY i",
		"SELECT * FROM c ORDER BY code",
		"SELECT * FROM d",
		"SELECT i AS \"a b\", t AS \"x,y\", count(*) FROM v GROUP BY i ORDER BY i; SELECT 1 AS one",
	} {
		want, err := exec.Command("sqlite3", "-csv", "-header", file, q).Output()
		if err != nil {
			t.Fatalf("sqlite3 -csv %q: %v", q, err)
		}
		if got := mustChunkd(t, "sql", "--file", file, "--format", "csv", "-q", q); got != string(want) {
			t.Errorf("%s:\nchunkd:  %q\nsqlite3: %q", q, got, want)
		}
	}
	// The differences docs/sql.md names.
	q := "SELECT 0.1 + 0.2 AS r, x'00ff' AS b"
	if got := mustChunkd(t, "sql", "--file", file, "--format", "csv", "-q", q); got != "r,b\n0.30000000000000004,\"x'00ff'\"\n" {
		t.Errorf("%s: %q", q, got)
	}
	if want, _ := exec.Command("sqlite3", "-csv", file, q).Output(); !strings.HasPrefix(string(want), "0.3,") {
		t.Errorf("sqlite3 -csv %s: %q", q, want)
	}
}

// TestClientTimeoutCoversHeaders: with --client-timeout below 10 s, a
// connection that sends nothing, half a request line, or a request head a
// byte at a time is cut near the client timeout (docs/service.md: the
// client has --client-timeout to send a request), not at 10 s.
func TestClientTimeoutCoversHeaders(t *testing.T) {
	svc := startService(t, t.TempDir(), t.TempDir(), "--client-timeout", "1s")
	host := strings.TrimPrefix(svc.http, "http://")
	trickle := func(c net.Conn) {
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)
		for i := range len(head) {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cases := map[string]func(net.Conn){
		"idle":                 func(net.Conn) {},
		"partial request line": func(c net.Conn) { c.Write([]byte("GET /v1/db")) },
		"head trickled":        trickle,
	}
	type result struct {
		name string
		took time.Duration
		err  error
	}
	results := make(chan result, len(cases))
	for name, send := range cases {
		go func() {
			c, err := net.Dial("tcp", host)
			if err != nil {
				results <- result{name, 0, err}
				return
			}
			defer c.Close()
			start := time.Now()
			go send(c)
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err = io.Copy(io.Discard, c) // until the service closes it
			results <- result{name, time.Since(start), err}
		}()
	}
	for range cases {
		r := <-results
		if r.err != nil || r.took < 500*time.Millisecond || r.took > 6*time.Second {
			t.Errorf("%s: cut after %v (%v); want about the client timeout, 1s", r.name, r.took.Round(time.Millisecond), r.err)
		}
	}
}

// watch is a writer that keeps what is written to it (its first 64 KiB)
// and closes seen once that holds lines lines.
type watch struct {
	mu    sync.Mutex
	b     bytes.Buffer
	lines int
	seen  chan struct{}
}

func newWatch(lines int) *watch { return &watch{lines: lines, seen: make(chan struct{})} }

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 64<<10 {
		w.b.Write(p)
	}
	if w.lines > 0 && bytes.Count(w.b.Bytes(), []byte("\n")) >= w.lines {
		close(w.seen)
		w.lines = 0
	}
	return len(p), nil
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestInterruptExits130: Ctrl-C stops sql and import with exit status 130
// (128 + SIGINT, as a shell reports it) and says "interrupted", not
// "context canceled". The endless query also shows that the table format
// prints rows while the query runs: it never ends, yet rows come.
func TestInterruptExits130(t *testing.T) {
	file, storeDir := smallDB(t)
	// interrupt runs cmd until seen is closed, then sends it SIGINT.
	interrupt := func(t *testing.T, cmd *exec.Cmd, seen <-chan struct{}, errOut fmt.Stringer) {
		t.Helper()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-seen:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s printed nothing in 2 minutes: %s", cmd.Args[1], errOut)
		}
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		if code := exitCode(t, err); code != 130 {
			t.Errorf("%s interrupted: exit status %d, want 130\n%s", cmd.Args[1], code, errOut)
		}
		if s := errOut.String(); !strings.Contains(s, "chunkd "+cmd.Args[1]+": interrupted") || strings.Contains(s, "context canceled") {
			t.Errorf("%s interrupted: stderr %q", cmd.Args[1], s)
		}
	}

	t.Run("sql", func(t *testing.T) {
		cmd := exec.Command(binary, "sql", "--file", file, "-q", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, 'row' AS what FROM c")
		out, errOut := newWatch(3), newWatch(0)
		cmd.Stdout, cmd.Stderr = out, errOut
		interrupt(t, cmd, out.seen, errOut)
		lines := strings.Split(out.String(), "\n")
		if strings.Join(strings.Fields(lines[0]), " ") != "x what" || strings.Join(strings.Fields(lines[2]), " ") != "2 row" {
			t.Errorf("the rows printed: %q", lines[:3])
		}
	})

	t.Run("import", func(t *testing.T) {
		// A store with a 2 s round trip, and a file that differs from the
		// version the store has: its upload is still to come when the
		// first progress line does (the same file would be found
		// unchanged, with no store request left after that line).
		changed := filepath.Join(t.TempDir(), "s2.sqlite")
		mustChunkd(t, "gen", "sentences", "--out", changed, "--sentences", "300", "--translations", "300", "--seed", "2")
		cmd := exec.Command(binary, "import", "--store", storeDir+"?latency=2s", "--db", "s", changed)
		errOut := newWatch(1)
		cmd.Stderr = errOut
		interrupt(t, cmd, errOut.seen, errOut)
		// The database reads as before: one version.
		if log := mustChunkd(t, "log", "--store", storeDir, "--db", "s"); strings.Count(log, "version ") != 1 {
			t.Errorf("after the interrupted import:\n%s", log)
		}
	})
}
