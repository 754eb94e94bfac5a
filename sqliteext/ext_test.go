package main

// These tests build the extension (scripts/build-extension) and load it
// into real host programs, run as subprocesses: the system's sqlite3
// shell and /usr/bin/python3 with its sqlite3 module. Every result is
// compared with the same query on the original file, read by the same
// program without the extension.

import (
	"bytes"
	"context"
	"crypto/tls"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/internal/testcerts"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/internal/testnet"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
)

// python is the interpreter the tests use: the system's, whose sqlite3
// module can load extensions.
const python = "/usr/bin/python3"

// extPath is the extension, built once by TestMain.
var extPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chunkd-ext-")
	if err != nil {
		panic(err)
	}
	extPath = filepath.Join(dir, "chunkd.so")
	os.Chmod(dir, 0o755) // another user's shell loads it too (TestSameHostFallback)
	out, err := exec.Command("../scripts/build-extension", extPath).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "scripts/build-extension: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is two versions of a database in a folder store, and cache
// services over it: one open, one that wants a token.
type fixture struct {
	v1, v2       string // the versions' files
	root1, root2 string
	store        string // the store's URL, with a query of its own
	service      string // the service's URL
	tokenService string // a service that wants the token "s3cret"
}

const dbName = "corpus"

func newFixture(t testing.TB, sentences int) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{v1: sqltest.GenDB(t, 1, sentences), v2: sqltest.GenDB(t, 2, sentences)}
	fs := testdb.NewStore(t)
	for i, v := range []string{f.v1, f.v2} {
		res, err := sqlchunks.Import(ctx, fs, v, sqlchunks.ImportOptions{DB: dbName, Appendix: true})
		if err != nil {
			t.Fatal(err)
		}
		*[]*string{&f.root1, &f.root2}[i] = res.Root.String()
	}
	// A store URL with a query of its own: percent-encoded in a URI.
	f.store = "file://" + fs.Root() + "?latency=0s"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The service, as chunkd serve runs it (open sets and page images
	// included), and the same service guarded by tokens.
	f.service = startService(t, service.Config{Cache: cache.Config{Store: fs, CacheDir: t.TempDir(), NoFsync: true}, Logger: quiet}).URL()
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("s3cret "+dbName+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Load(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	f.tokenService = startService(t, service.Config{Cache: cache.Config{Store: fs, CacheDir: t.TempDir(), NoFsync: true}, Logger: quiet,
		Guard: &auth.Guard{Tokens: tokens, Logger: quiet}}).URL()
	return f
}

// uri returns the URI of database db with the given parameters (each
// "k=v", the value percent-encoded here).
func uri(db string, params ...string) string {
	q := []string{"vfs=chunkd"}
	for _, p := range params {
		k, v, _ := strings.Cut(p, "=")
		q = append(q, k+"="+url.QueryEscape(v))
	}
	return "file:" + db + "?" + strings.Join(q, "&")
}

// queries are compared on every path: a join, aggregates, a sort, blobs
// over a page.
var queries = []string{
	strings.TrimSuffix(gen.SeedQuery, ";"),
	`SELECT Lang, count(*), sum(length(Text)), max(length(Text)) FROM sentences GROUP BY Lang ORDER BY Lang`,
	`SELECT s.SentenceId, s.Lang, t.TranslationId FROM sentences s JOIN translations t ON t.SentenceId = s.SentenceId WHERE s.SentenceId % 97 = 1 ORDER BY s.SentenceId DESC, t.TranslationId`,
	`SELECT SentenceId, Text FROM sentences ORDER BY length(Text) DESC, SentenceId LIMIT 25`,
	`SELECT id, length(b), b FROM blobs ORDER BY id`,
	`PRAGMA integrity_check`,
}

// shell runs the sqlite3 shell on script and returns its stdout and
// stderr.
func shell(t testing.TB, script string, env ...string) (string, string) {
	t.Helper()
	return runShell(t, exec.Command("sqlite3", "-batch"), script, env...)
}

// runShell runs cmd, a shell, on script (see shell).
func runShell(t testing.TB, cmd *exec.Cmd, script string, env ...string) (string, string) {
	t.Helper()
	cmd.Stdin = strings.NewReader(script)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("sqlite3 hung on:\n%s", script)
	}
	return out.String(), errOut.String()
}

// shellQueries is a shell script that opens db (a .open argument) and
// runs every query, printing values exactly (blobs as X'..').
func shellQueries(load bool, open string, qs ...string) string {
	var b strings.Builder
	if load {
		fmt.Fprintf(&b, ".load %s\n", extPath)
	}
	fmt.Fprintf(&b, ".open %s\n.mode quote\n", open)
	for _, q := range qs {
		b.WriteString(q + ";\n")
	}
	return b.String()
}

func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on this machine", tool)
		}
	}
}

func TestShell(t *testing.T) {
	needTools(t, "sqlite3")
	f := newFixture(t, 6000)
	want := map[string]string{}
	for _, v := range []string{f.v1, f.v2} {
		out, errOut := shell(t, shellQueries(false, "--readonly "+v, queries...))
		if errOut != "" || strings.Count(out, "\n") < 50 {
			t.Fatalf("the shell on %s: %s", v, errOut)
		}
		want[v] = out
	}
	paths := []struct {
		name, uri, file, root string
	}{
		{"service", uri(dbName, "service="+f.service), f.v2, f.root2},
		{"service, through its API", uri(dbName, "service="+f.service, "dir=none"), f.v2, f.root2},
		{"store", uri(dbName, "store="+f.store), f.v2, f.root2},
		{"service and store", uri(dbName, "service="+f.service, "store="+f.store, "mem=16MiB"), f.v2, f.root2},
		{"store, at the first version", uri(dbName, "store="+f.store, "at="+f.root1), f.v1, f.root1},
		{"service, at the first version", uri(dbName, "service="+f.service, "at="+f.root1, "mem=0", "dir=none"), f.v1, f.root1},
		{"service, at the first version, same host", uri(dbName, "service="+f.service, "at="+f.root1, "mem=0"), f.v1, f.root1},
		{"service with a token", uri(dbName, "service="+f.tokenService, "token=s3cret"), f.v2, f.root2},
		{"store, at a time after the last version", uri(dbName, "store="+f.store, "at=2999-01-01T00:00:00Z"), f.v2, f.root2},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			out, errOut := shell(t, shellQueries(true, p.uri, queries...))
			if errOut != "" || out != want[p.file] {
				t.Fatalf("results differ from the file's (%d bytes, want %d): %s", len(out), len(want[p.file]), errOut)
			}
			out, errOut = shell(t, shellQueries(true, p.uri, "SELECT chunkd_root(), chunkd_version() LIKE 'chunkd %'", "SELECT chunkd_stats()"))
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if errOut != "" || len(lines) != 2 || lines[0] != fmt.Sprintf("'%s',1", p.root) {
				t.Fatalf("chunkd_root(), chunkd_version(): %q %s", out, errOut)
			}
			var stats struct {
				DB        string `json:"db"`
				Root      string `json:"root"`
				PagesRead int64  `json:"pages_read"`
				Service   struct {
					Requests int64 `json:"requests"`
				} `json:"service"`
				ServiceDir string `json:"service_dir"`
				ImageReads int64  `json:"image_reads"`
			}
			if err := json.Unmarshal([]byte(strings.Trim(lines[1], "'")), &stats); err != nil || stats.Root != p.root || stats.DB != dbName || stats.PagesRead == 0 {
				t.Fatalf("chunkd_stats() = %s: %+v, %v", lines[1], stats, err)
			}
			// Through a service's API, a version opens by its open set, in
			// one request that names the current root when at= does not,
			// and holds what the schema reads. On the service's host (the client
			// finds its directory by itself: these services run here), by
			// its page image: where the directory is, then the image, and
			// every page from the image.
			switch {
			case strings.Contains(p.uri, "dir=none"):
				if stats.Service.Requests != 1 || stats.ServiceDir != "" {
					t.Fatalf("chunkd_stats() = %s: %d service requests, want 1 (the open set), and no service directory", lines[1], stats.Service.Requests)
				}
			case strings.Contains(p.uri, "service="):
				if stats.Service.Requests != 2 || stats.ServiceDir == "" || stats.ImageReads == 0 {
					t.Fatalf("chunkd_stats() = %s: %d service requests (want 2: the directory, the image), directory %q, %d pages from the image", lines[1], stats.Service.Requests, stats.ServiceDir, stats.ImageReads)
				}
			}
		})
	}

	// A service that never sends the open set (hung on it alone): the
	// open gives it half its time, then opens without it.
	t.Run("open set never sent", func(t *testing.T) {
		target, _ := url.Parse(f.service)
		proxy := httputil.NewSingleHostReverseProxy(target)
		hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/sqlite/open") {
				<-r.Context().Done()
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		defer hung.Close()
		out, errOut := shell(t, shellQueries(true, uri(dbName, "service="+hung.URL, "timeout=3s"), queries...))
		if errOut != "" || out != want[f.v2] {
			t.Fatalf("results differ from the file's (%d bytes, want %d): %s", len(out), len(want[f.v2]), errOut)
		}
	})

	t.Run("environment", func(t *testing.T) {
		out, errOut := shell(t, shellQueries(true, "file:"+dbName+"?vfs=chunkd", queries...), "CHUNKD_STORE="+f.store)
		if errOut != "" || out != want[f.v2] {
			t.Fatalf("CHUNKD_STORE: results differ: %s", errOut)
		}
		out, errOut = shell(t, shellQueries(true, "file:"+dbName+"?vfs=chunkd", queries[0]), "CHUNKD_SERVICE="+f.tokenService, "CHUNKD_TOKEN=s3cret")
		if errOut != "" || !strings.HasPrefix(want[f.v2], out) || out == "" {
			t.Fatalf("CHUNKD_SERVICE, CHUNKD_TOKEN: %s", errOut)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range errorCases(t, f) {
			out, errOut := shell(t, shellQueries(true, c.uri, c.query))
			if out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("%s: stdout %q, stderr %q; want an error with %q", c.name, out, errOut, c.want)
			}
			if c.secret() != "" && strings.Contains(out+errOut, c.secret()) {
				t.Errorf("%s: the shell printed the URI's secret: %q", c.name, errOut)
			}
		}
	})
}

// errorCase is a URI that must fail, with the SQLite error it must fail
// with and a part of its message. A URI that holds a secret (secret)
// opens, and its queries fail with an I/O error: chunkd_last_error()
// holds want then.
type errorCase struct {
	name, uri, query string
	code             string // the SQLite error name
	want             string // in the message
}

// secret returns the secret the case's URI holds, its token or its store
// URL's secret key, or "".
func (c errorCase) secret() string {
	u, err := url.Parse(c.uri)
	if err != nil {
		panic(err)
	}
	if tok := u.Query().Get("token"); tok != "" {
		return tok
	}
	if st, err := url.Parse(u.Query().Get("store")); err == nil {
		return st.Query().Get("secret_key")
	}
	return ""
}

func errorCases(t testing.TB, f *fixture) []errorCase {
	refused := testnet.Refused(t)
	hung := testnet.Silent(t)
	q := "SELECT count(*) FROM sentences"
	return []errorCase{
		{"unknown database", uri("nosuch", "store="+f.store), q, "SQLITE_CANTOPEN", `no database "nosuch"`},
		{"unknown database at the service", uri("nosuch", "service="+f.service), q, "SQLITE_CANTOPEN", `unknown database "nosuch"`},
		{"unreachable service, no store", uri(dbName, "service=http://"+refused), q, "SQLITE_CANTOPEN", refused + ": connect: connection refused"},
		{"service that never answers, no store", uri(dbName, "service=http://"+hung, "timeout=1s"), q, "SQLITE_CANTOPEN", "deadline exceeded"},
		{"bad version", uri(dbName, "store="+f.store, "at=xyz"), q, "SQLITE_CANTOPEN", "at=xyz"},
		{"a version that is not there", uri(dbName, "store="+f.store, "at=00000000000000000000000000000001"), q, "SQLITE_CANTOPEN", "00000000000000000000000000000001"},
		{"the all-zero root", uri(dbName, "store="+f.store, "at=00000000000000000000000000000000"), q, "SQLITE_CANTOPEN", `no such version 00000000000000000000000000000000 of database "corpus"`},
		{"a time before the first version", uri(dbName, "service="+f.service, "at=2001-02-03T04:05:06Z"), q, "SQLITE_CANTOPEN", `no such version at or before 2001-02-03T04:05:06Z in database "corpus"`},
		{"bad size", uri(dbName, "store="+f.store, "mem=lots"), q, "SQLITE_CANTOPEN", "mem=lots"},
		{"unknown parameter", uri(dbName, "store="+f.store, "servce=x"), q, "SQLITE_CANTOPEN", `unknown URI parameter "servce"`},
		{"no service or store", uri(dbName), q, "SQLITE_CANTOPEN", "no service= or store="},
		{"bad store URL", uri(dbName, "store=gopher://x"), q, "SQLITE_CANTOPEN", `unknown scheme "gopher"`},
		{"gRPC service", uri(dbName, "service=grpc://"+refused), q, "SQLITE_CANTOPEN", "reads cache services over HTTP only"},
		{"token refused", uri(dbName, "service="+f.tokenService, "token=wrong-t0ken"), q, "SQLITE_IOERR_READ", "401"},
		{"unreachable service, a token", uri(dbName, "service=http://"+refused, "token=t0ken-of-mine"), q, "SQLITE_IOERR_READ", "connection refused"},
		{"store URL with a secret", uri(dbName, "store=s3://b/p?endpoint=http://"+refused+"&access_key=ak&secret_key=s3cr3t-key&retries=0"), q, "SQLITE_IOERR_READ", refused},
		{"write", uri(dbName, "store="+f.store), "DELETE FROM sentences", "SQLITE_READONLY", "attempt to write a readonly database"},
	}
}

// pyScript loads the extension into Python's sqlite3 module and runs the
// job on stdin (JSON): every query on the reference file, then on each
// URI from `threads` threads at once, each with its connection; then the
// error cases. It prints a JSON report.
const pyScript = `
import json, sqlite3, sys, threading

job = json.load(sys.stdin)
# Loaded twice (say by two parts of a program): the second load finds
# the library loaded, and its init does no harm.
for _ in range(2):
    loader = sqlite3.connect(":memory:")
    loader.enable_load_extension(True)
    loader.load_extension(job["ext"])

def run(conn):
    return [repr(conn.execute(q).fetchall()) for q in job["queries"]]

report = {"paths": {}, "errors": {}}
for name, p in job["paths"].items():
    ref = sqlite3.connect("file:" + p["file"] + "?mode=ro", uri=True)
    want = run(ref)
    ref.close()
    results = [None] * job["threads"]
    def worker(i):
        try:
            conn = sqlite3.connect(p["uri"], uri=True, check_same_thread=False)
            got = run(conn)
            got2 = run(conn)
            root = conn.execute("SELECT chunkd_root()").fetchone()[0]
            conn.close()
            results[i] = "ok" if got == want and got2 == want and root == p["root"] else "differ (root %s)" % root
        except Exception as e:
            results[i] = "%s: %s" % (type(e).__name__, e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(job["threads"])]
    for th in threads: th.start()
    for th in threads: th.join()
    report["paths"][name] = results
for c in job["errors"]:
    conn = None
    try:
        conn = sqlite3.connect(c["uri"], uri=True)
        conn.execute(c["query"]).fetchall()
        report["errors"][c["name"]] = {"code": "none", "message": ""}
    except sqlite3.Error as e:
        last = conn.execute("SELECT chunkd_last_error()").fetchone()[0] if conn else None
        report["errors"][c["name"]] = {"code": getattr(e, "sqlite_errorname", "?"), "message": str(e), "last_error": last}
print(json.dumps(report))
`

func TestPython(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not on this machine", python)
	}
	f := newFixture(t, 6000)
	type path struct {
		URI  string `json:"uri"`
		File string `json:"file"`
		Root string `json:"root"`
	}
	type errCase struct {
		Name  string `json:"name"`
		URI   string `json:"uri"`
		Query string `json:"query"`
	}
	job := struct {
		Ext     string          `json:"ext"`
		Queries []string        `json:"queries"`
		Threads int             `json:"threads"`
		Paths   map[string]path `json:"paths"`
		Errors  []errCase       `json:"errors"`
	}{Ext: extPath, Queries: queries, Threads: 8, Paths: map[string]path{
		"service":                    {uri(dbName, "service="+f.service), f.v2, f.root2},
		"store":                      {uri(dbName, "store="+f.store), f.v2, f.root2},
		"service and store":          {uri(dbName, "service="+f.service, "store="+f.store), f.v2, f.root2},
		"store, the first version":   {uri(dbName, "store="+f.store, "at="+f.root1), f.v1, f.root1},
		"service, the first version": {uri(dbName, "service="+f.service, "at="+f.root1), f.v1, f.root1},
	}}
	cases := errorCases(t, f)
	for _, c := range cases {
		job.Errors = append(job.Errors, errCase{c.name, c.uri, c.query})
	}
	in, _ := json.Marshal(job)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", pyScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	var report struct {
		Paths  map[string][]string `json:"paths"`
		Errors map[string]struct {
			Code      string  `json:"code"`
			Message   string  `json:"message"`
			LastError *string `json:"last_error"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("python's report %q: %v\n%s", out, err, stderr.String())
	}
	for name := range job.Paths {
		got := report.Paths[name]
		if len(got) != job.Threads {
			t.Errorf("%s: %d threads reported, want %d", name, len(got), job.Threads)
		}
		for i, r := range got {
			if r != "ok" {
				t.Errorf("%s, thread %d: %s", name, i, r)
			}
		}
	}
	for _, c := range cases {
		got := report.Errors[c.name]
		msg := got.Message
		if c.secret() != "" { // the open went on; chunkd_last_error() says why
			if got.LastError == nil || !strings.Contains(got.Message, "disk I/O error") {
				t.Errorf("%s: %s %q, chunkd_last_error() %v; want disk I/O error, and the cause from chunkd_last_error()", c.name, got.Code, got.Message, got.LastError)
				continue
			}
			msg = *got.LastError
		}
		if got.Code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %s %q; want %s with %q", c.name, got.Code, msg, c.code, c.want)
		}
		if c.secret() != "" && strings.Contains(string(out)+stderr.String(), c.secret()) {
			t.Errorf("%s: the secret is in python's output", c.name)
		}
	}
}

// startService starts a cache service on loopback with cfg, closed when
// the test ends.
func startService(t testing.TB, cfg service.Config) *service.Service {
	t.Helper()
	cfg.HTTP = "127.0.0.1:0"
	svc, err := service.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// TestServiceDies: when the service dies after the database opened, a
// query that needs a page fails with SQLite's "disk I/O error", and the
// cause is readable: one line on stderr when reads begin to fail, and
// chunkd_last_error() (NULL while reads work). The URI's token is printed
// nowhere.
func TestServiceDies(t *testing.T) {
	needTools(t, "sqlite3")
	f := newFixture(t, 6000)
	dead := filepath.Join(t.TempDir(), "dead")
	target, _ := url.Parse(f.tokenService)
	proxy := httputil.NewSingleHostReverseProxy(target)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat(dead); err == nil { // dead: connections close unanswered
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer svc.Close()
	// Through the service's API (dir=none): on its host the client would
	// read its page image, which does not die with it.
	script := shellQueries(true, uri(dbName, "service="+svc.URL, "token=s3cret", "mem=0", "timeout=5s", "dir=none"),
		"SELECT count(*) FROM sentences WHERE SentenceId < 10",
		"SELECT chunkd_last_error()",
		".shell touch "+dead,
		"SELECT sum(length(Text)) FROM sentences",
		"SELECT sum(TranslationId) FROM translations",
		"SELECT chunkd_last_error()")
	script = strings.ReplaceAll(script, ".shell touch "+dead+";", ".shell touch "+dead)
	out, errOut := shell(t, script)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[1] != "NULL" {
		t.Fatalf("stdout %q, stderr %q", out, errOut)
	}
	if !strings.Contains(lines[2], "cache service "+svc.URL) || !strings.Contains(lines[2], "read page") {
		t.Errorf("chunkd_last_error() after the service died: %s", lines[2])
	}
	if strings.Count(errOut, "disk I/O error (10)") != 2 {
		t.Errorf("want both queries to fail with disk I/O error: %q", errOut)
	}
	if n := strings.Count(errOut, "level=ERROR"); n != 1 || !strings.Contains(errOut, `a read of database \"corpus\" failed`) || !strings.Contains(errOut, svc.URL) {
		t.Errorf("want one log line naming the cause, got %d: %q", n, errOut)
	}
	if strings.Contains(out+errOut, "s3cret") {
		t.Errorf("the token is in the shell's output: %q %q", out, errOut)
	}
}

// TestPrivateCA: ca= (or CHUNKD_CA) names the CA that signs an https
// service's certificate; without it the system's CAs do not trust it.
func TestPrivateCA(t *testing.T) {
	needTools(t, "sqlite3")
	f := newFixture(t, 2000)
	certs := testcerts.Make(t)
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(f.service)
	svc := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	svc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	svc.StartTLS()
	defer svc.Close()
	q := "SELECT count(*), sum(length(Text)) FROM sentences"
	want, _ := shell(t, shellQueries(false, "--readonly "+f.v2, q))
	for _, c := range []struct {
		name string
		uri  string
		env  []string
	}{
		{"ca=", uri(dbName, "service="+svc.URL, "ca="+certs.CA), nil},
		{"CHUNKD_CA", uri(dbName, "service="+svc.URL), []string{"CHUNKD_CA=" + certs.CA}},
	} {
		if out, errOut := shell(t, shellQueries(true, c.uri, q), c.env...); errOut != "" || out != want || want == "" {
			t.Errorf("%s: %q %q, want %q", c.name, out, errOut, want)
		}
	}
	_, errOut := shell(t, shellQueries(true, uri(dbName, "service="+svc.URL), q))
	if !strings.Contains(errOut, "certificate signed by unknown authority") {
		t.Errorf("without the CA: %q", errOut)
	}
	missing := filepath.Join(t.TempDir(), "nosuch.pem")
	if _, errOut := shell(t, shellQueries(true, uri(dbName, "service="+svc.URL, "ca="+missing), q)); !strings.Contains(errOut, missing) {
		t.Errorf("a CA file that is not there: %q", errOut)
	}
}

// TestSameHostFallback: a program on the service's host that cannot read
// the service's cache directory (another user: the directory is the
// service's own, mode 0700) reads through the service's API instead, with
// the same results; the service's own user reads the page image.
func TestSameHostFallback(t *testing.T) {
	needTools(t, "sqlite3", "runuser")
	if os.Geteuid() != 0 {
		t.Skip("running the shell as another user takes root (runuser); this test runs as uid " + fmt.Sprint(os.Geteuid()))
	}
	f := newFixture(t, 3000)
	want, errOut := shell(t, shellQueries(false, "--readonly "+f.v2, queries...))
	if errOut != "" {
		t.Fatal(errOut)
	}
	u := uri(dbName, "service="+f.service)
	stats := func(out string) (dir string, images, requests int64) {
		var st struct {
			ServiceDir string `json:"service_dir"`
			ImageReads int64  `json:"image_reads"`
			Service    struct {
				Requests int64 `json:"requests"`
			} `json:"service"`
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err := json.Unmarshal([]byte(strings.Trim(lines[len(lines)-1], "'")), &st); err != nil {
			t.Fatalf("chunkd_stats(): %q: %v", out, err)
		}
		return st.ServiceDir, st.ImageReads, st.Service.Requests
	}
	for _, who := range []string{"root", "nobody"} {
		cmd := exec.Command("sqlite3", "-batch")
		if who != "root" {
			cmd = exec.Command("runuser", "-u", who, "--", "sqlite3", "-batch")
		}
		out, errOut := runShell(t, cmd, shellQueries(true, u, append(queries, "SELECT chunkd_stats()")...), "HOME=/tmp")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if errOut != "" || strings.Join(lines[:len(lines)-1], "\n")+"\n" != want {
			t.Fatalf("as %s: results differ from the file's: %s", who, errOut)
		}
		dir, images, requests := stats(out)
		switch {
		case who == "root" && (dir == "" || images == 0):
			t.Errorf("as the service's user: directory %q, %d pages from the image; want the page image", dir, images)
		case who != "root" && (dir != "" || images != 0 || requests < 2):
			t.Errorf("as %s: directory %q, %d pages from the image, %d service requests; want every page through the API", who, dir, images, requests)
		}
	}
}

// TestLinksNoGRPC: the extension reads services over HTTP and links no
// gRPC or protobuf (scripts/build-extension's chunkd_nogrpc tag), which
// every process that loads it would pay for in load time.
func TestLinksNoGRPC(t *testing.T) {
	info, err := buildinfo.ReadFile(extPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Deps {
		if strings.HasPrefix(m.Path, "google.golang.org/grpc") || strings.HasPrefix(m.Path, "google.golang.org/protobuf") {
			t.Errorf("the extension links %s %s", m.Path, m.Version)
		}
	}
}
