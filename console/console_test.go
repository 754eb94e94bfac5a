package console_test

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

var screenshot = flag.String("screenshot", "", "write a screenshot of the console showing a query's result to this PNG file")

// chromium returns Debian's chromium, or skips the test saying why; with
// CHUNKD_REQUIRE_CHROMIUM=1 (scripts/test sets it once it has installed
// the package) a missing browser fails the test instead.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: the console's test drives a real headless Chromium (Debian's package; scripts/test installs it as root with apt-get install -y chromium)"
	if os.Getenv("CHUNKD_REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile and no network
// of its own (no background requests, updates or sync), closed when the
// test ends.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	t.Cleanup(cancel)
	bctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, which lives as long as bctx
		t.Fatalf("start %s: %v", path, err)
	}
	ctx, cancel3 := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// consoleDB publishes a generated database with the edge table as db1 of
// a new store and returns the store, the source file and its root.
func consoleDB(t *testing.T) (store.Store, string, addr.Addr) {
	t.Helper()
	src := sqltest.GenDB(t, 1, 11_000)
	sqltest.AddEdgeTable(t, src)
	st := testdb.NewStore(t)
	res, err := sqlchunks.Import(context.Background(), st, src, sqlchunks.ImportOptions{DB: "db1", Message: "console test"})
	if err != nil {
		t.Fatal(err)
	}
	return st, src, res.Root
}

// startService serves st, guarded by guard (nil: no tokens).
func startService(t *testing.T, st store.Store, guard *auth.Guard) *service.Service {
	t.Helper()
	svc, err := service.Start(service.Config{Cache: cache.Config{Store: st, CacheDir: t.TempDir()}, HTTP: "127.0.0.1:0", Guard: guard, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// readRows is the script that reads the rendered rows: each cell's type
// and text, without the row number.
const readRows = `Array.from(document.querySelectorAll('#results tbody tr')).map(tr =>
	Array.from(tr.querySelectorAll('td')).slice(1).map(td => [td.dataset.type, td.textContent]))`

// shown is how the console shows v (its text, and its type).
func shown(v api.Value) [2]string {
	switch v.Type {
	case api.SQLNull:
		return [2]string{"null", "NULL"}
	case api.SQLInteger:
		return [2]string{"integer", fmt.Sprint(v.Int)}
	case api.SQLReal:
		return [2]string{"real", string(api.AppendReal(nil, v.Real))}
	case api.SQLBlob:
		if len(v.Bytes) > 64 {
			return [2]string{"blob", "x'" + hex.EncodeToString(v.Bytes[:64]) + "'… (" + fmt.Sprint(len(v.Bytes)) + " bytes)"}
		}
		return [2]string{"blob", "x'" + hex.EncodeToString(v.Bytes) + "'"}
	}
	return [2]string{"text", string([]rune(string(v.Bytes)))} // what is not UTF-8 shown as U+FFFD
}

// open navigates to the console's URL for q and waits for its result.
func open(t *testing.T, ctx context.Context, base string, v url.Values) [][][2]string {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Do(wctx, chromedp.Navigate(base+"/?"+v.Encode()), chromedp.WaitReady(`#results[data-state="done"]`))
	if err != nil {
		msg, _ := chromedp.Run(ctx, chromedp.TextContent(`#error`))
		t.Fatalf("%v: %v (error shown: %q)", v, err, msg)
	}
	return rowsShown(t, ctx)
}

// rowsShown reads the rendered rows.
func rowsShown(t *testing.T, ctx context.Context) [][][2]string {
	t.Helper()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][][2]string](readRows))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// compare fails the test if the rendered rows are not want's first
// page.
func compare(t *testing.T, what string, got [][][2]string, want [][]api.Value) {
	t.Helper()
	if n := min(len(want), 100); len(got) != n {
		t.Fatalf("%s: %d rows shown, want %d (of %d)", what, len(got), n, len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: row %d shows %d values, want %d", what, i+1, len(got[i]), len(want[i]))
		}
		for j := range got[i] {
			if w := shown(want[i][j]); got[i][j] != w {
				t.Fatalf("%s: row %d column %d shows %q, sqlite3 gives %q", what, i+1, j+1, got[i][j], w)
			}
		}
	}
}

// TestConsole opens the URL of queries in a real headless Chromium and
// compares the rows it shows with the sqlite3 shell's on the source file:
// the seed's queries and the typed edge cases, at the current version
// and a pinned one; then pages, the result cache, an error, the tables
// and versions, the URL it keeps, and a download.
func TestConsole(t *testing.T) {
	path := chromium(t)
	st, src, root := consoleDB(t)
	svc := startService(t, st, nil)
	ctx := browser(t, path)

	queries := append(append([]string{}, sqltest.Queries...), sqltest.EdgeCases...)
	for i, q := range queries {
		v := url.Values{"db": {"db1"}, "sql": {q}}
		if i%2 == 1 {
			v.Set("at", root.String())
		}
		compare(t, fmt.Sprintf("%q at %q", q, v.Get("at")), open(t, ctx, svc.URL(), v), sqltest.Shell(t, src, q))
	}

	// Pages of 100 rows; the result cache answers the same query again.
	q := `SELECT SentenceId, Lang, Text FROM sentences WHERE SentenceId <= 250 ORDER BY SentenceId`
	want := sqltest.Shell(t, src, q)
	v := url.Values{"db": {"db1"}, "at": {root.String()}, "sql": {q}}
	compare(t, "page 1", open(t, ctx, svc.URL(), v), want)
	status := text(t, ctx, `#status`)
	if err := chromedp.Do(ctx, chromedp.Click(`#next`)); err != nil {
		t.Fatal(err)
	}
	if page := text(t, ctx, `#page`); !strings.Contains(status, "250 rows") || page != "rows 101–200 of 250" {
		t.Errorf("status %q, page %q", status, page)
	}
	compare(t, "page 2", rowsShown(t, ctx), want[100:])
	if err := chromedp.Do(ctx, chromedp.Click(`#run`), chromedp.WaitReady(`#results[data-state="done"]`)); err != nil {
		t.Fatal(err)
	}
	if status := text(t, ctx, `#status`); !strings.Contains(status, "result cache: hit") {
		t.Errorf("run again: status %q, want a hit of the result cache", status)
	}

	// The tables with their row counts, the version picker, the URL.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](countsShown)); err != nil {
		t.Fatal(err)
	}
	tables, versions := text(t, ctx, `#tables`), text(t, ctx, `#at`)
	location, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.search`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"edge12 rows", "sentences11,000 rows", "translations22,000 rows", "blobs3 rows"} {
		if !strings.Contains(strings.ReplaceAll(tables, " ", ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("tables %q lack %q", tables, want)
		}
	}
	if !strings.Contains(versions, "current ("+root.String()[:12]+")") || !strings.Contains(versions, "console test") {
		t.Errorf("versions %q", versions)
	}
	if u, _ := url.ParseQuery(strings.TrimPrefix(location, "?")); u.Get("db") != "db1" || u.Get("at") != root.String() || u.Get("sql") != q {
		t.Errorf("the page's URL %q does not carry its query", location)
	}

	// An error says what SQLite says.
	err = chromedp.Do(ctx,
		chromedp.Navigate(svc.URL()+"/?"+url.Values{"db": {"db1"}, "sql": {"DELETE FROM sentences"}}.Encode()),
		chromedp.WaitReady(`#results[data-state="error"]`),
	)
	if msg := text(t, ctx, `#error`); err != nil || !strings.Contains(msg, "read-only") || !strings.Contains(msg, "SQLITE_AUTH") {
		t.Errorf("a write: error %q (%v)", msg, err)
	}

	if *screenshot != "" {
		err := chromedp.Do(ctx,
			chromedp.Navigate(svc.URL()+"/?"+url.Values{"db": {"db1"}, "at": {root.String()}, "sql": {"SELECT id, v, typeof(v), d, b FROM edge ORDER BY id"}}.Encode()),
			chromedp.WaitReady(`#results[data-state="done"]`),
		)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](countsShown)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(`#tables li:nth-child(2) details summary`)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsoleToken: with tokens, the page asks for one, keeps it in the
// tab's sessionStorage, and reads with it.
func TestConsoleToken(t *testing.T) {
	path := chromium(t)
	st, src, _ := consoleDB(t)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("s3cret db1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Load(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	svc := startService(t, st, &auth.Guard{Tokens: tokens, Logger: slog.New(slog.DiscardHandler)})
	ctx := browser(t, path)
	q := `SELECT id, v FROM edge ORDER BY id`
	for i, step := range []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(svc.URL() + "/?" + url.Values{"db": {"db1"}, "sql": {q}}.Encode()),
		chromedp.WaitReady(`#results[data-state="error"]`),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, "s3cret"),
		chromedp.Click(`#token-form button`),
		chromedp.WaitReady(`#results[data-state="done"]`),
	} {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := chromedp.Do(sctx, step)
		cancel()
		if err != nil {
			t.Fatalf("step %d: %v (error shown: %q)", i, err, text(t, ctx, `#error`))
		}
	}
	compare(t, "with the token", rowsShown(t, ctx), sqltest.Shell(t, src, q))
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem('chunkd-token')`))
	if err != nil {
		t.Fatal(err)
	}
	if stored != "s3cret" {
		t.Errorf("sessionStorage holds %q", stored)
	}
}

// countsShown is true once every table's row count is shown.
const countsShown = `Array.from(document.querySelectorAll('#tables .count')).every(c => c.textContent !== '')`

// text is an element's text content.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(sel))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return s
}
