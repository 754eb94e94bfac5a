package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// demoCommand is the README's first command: on embedded defaults (a
// local-folder store, nothing to install) it reproduces the seed article's
// measurement. It generates a sentences data set, publishes it to a
// folder store with an emulated round trip, starts the cache service, and
// runs the seed's join on the local file, from the store directly, and
// through the service, printing the times side by side.
type demoCommand struct{ cmdBase }

func (c *demoCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("demo", "demo [--dir DIR] [--sentences N] [--translations M] [--rtt 30ms]", c.stderr)
	dir := fs.String("dir", "", "working directory for the data set, store and cache (default: a new temp dir, removed after)")
	sentences := fs.Int("sentences", 200_000, "rows in sentences (1,250,000 makes ~200 MB)")
	translations := fs.Int("translations", 400_000, "rows in translations")
	rtt := fs.Duration("rtt", 30*time.Millisecond, "emulated object-store round trip (S3's first-byte latency is ~30 ms)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q (demo takes only flags)", fs.Args())
	}
	if *sentences < 1 || *translations < 1 || *rtt < 0 {
		return usagef("--sentences and --translations must be positive, --rtt not negative")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "chunkd-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	out := c.stdout
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	file, plain, err := demoStore(ctx, say, *dir, *sentences, *translations)
	if err != nil {
		return err
	}
	defer plain.Close()

	// The same store as the service and the client see it: every request
	// pays the emulated round trip.
	far := store.WithLatency(plain, *rtt, 0)
	storeURL := filepath.Join(*dir, "store")
	if *rtt > 0 {
		storeURL = "file://" + storeURL + "?latency=" + rtt.String()
	}

	// The cache service, in this process, on loopback.
	cacheDir := filepath.Join(*dir, "cache")
	svc, service, err := demoService(far, cacheDir)
	if err != nil {
		return err
	}
	defer svc.Close()
	say("cache service on %s; store round trip %v (emulated in user space)", service, *rtt)
	say("")
	say("query: %s", gen.SeedQuery)
	say("")

	results, err := demoRuns(ctx, say, file, storeURL, service, svc.Cache, cacheDir)
	if err != nil {
		return err
	}
	printDemoResults(say, results)
	return nil
}

// demoDB is the database the demo publishes.
const demoDB = "sentences"

// demoStore generates the data set in dir (unless it is there) and
// publishes it to a local-folder store in dir/store, with no latency for
// the upload.
func demoStore(ctx context.Context, say func(string, ...any), dir string, sentences, translations int) (string, store.Store, error) {
	file := filepath.Join(dir, fmt.Sprintf("sentences-%d-%d.sqlite", sentences, translations))
	if _, err := os.Stat(file); err != nil {
		start := time.Now()
		if err := gen.Sentences(file, gen.SentencesOptions{Sentences: sentences, Translations: translations, Seed: 1}); err != nil {
			return "", nil, fmt.Errorf("generate: %w", err)
		}
		say("generated %s in %v", file, time.Since(start).Round(time.Millisecond))
	}
	st, err := os.Stat(file)
	if err != nil {
		return "", nil, err
	}
	storeDir := filepath.Join(dir, "store")
	plain, err := store.Open(ctx, storeDir)
	if err != nil {
		return "", nil, err
	}
	res, err := sqlchunks.Import(ctx, plain, file, sqlchunks.ImportOptions{DB: demoDB, Message: "demo", Appendix: true})
	if err != nil {
		plain.Close()
		return "", nil, fmt.Errorf("import: %w", err)
	}
	say("imported %.1f MB as %d pages into %s (version %s)", float64(st.Size())/1e6, res.Pages, storeDir, res.Root)
	return file, plain, nil
}

// demoService starts a cache service over s in this process, on
// loopback, and returns it and its URL; Close stops it.
func demoService(s store.Store, cacheDir string) (*service.Service, string, error) {
	svc, err := service.Start(service.Config{Cache: cache.Config{Store: s, CacheDir: cacheDir}, HTTP: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, "", err
	}
	return svc, svc.URL(), nil
}

// demoResult is the seed query on one path.
type demoResult struct {
	path  string
	took  time.Duration
	rows  int
	stats client.Stats
}

// demoRuns runs the seed query on each path, each through a fresh
// client: the local file, the store directly, the service cold, then
// (once it has the database on disk) warm, and its files on this host.
func demoRuns(ctx context.Context, say func(string, ...any), file, storeURL, service string, c *cache.Cache, cacheDir string) ([]demoResult, error) {
	var results []demoResult
	run := func(path string, open func() (*openDB, error)) error {
		start := time.Now()
		d, err := open()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rows, err := d.run(ctx, gen.SeedQuery, "csv", io.Discard)
		took := time.Since(start)
		var stats client.Stats
		if d.client != nil {
			stats = d.client.Stats()
		}
		d.close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		results = append(results, demoResult{path, took, rows, stats})
		say("%-28s %9v  %s", path, took.Round(time.Millisecond), count(int64(rows), "row"))
		return nil
	}
	tiers := func(service, serviceDir string) func() (*openDB, error) {
		return func() (*openDB, error) {
			return openStoreSQLite(ctx, tierFlags{store: storeURL, db: demoDB, service: service, serviceDir: serviceDir, mem: 256 << 20, readAhead: 64})
		}
	}
	for _, step := range []func() error{
		func() error { return run("local file", func() (*openDB, error) { return openLocalSQLite(file) }) },
		func() error { return run("object store directly", tiers("", "")) },
		// Through the service's HTTP API, as a client on another host reads
		// it (this one would find the service's directory by itself).
		func() error { return run("cache service, cold", tiers(service, client.NoLocalDir)) },
		func() error { // the appendix file holds every chunk
			return c.WaitCached(ctx, demoDB, 10*time.Minute, func(ti api.TableInfo) bool { return ti.Appendix })
		},
		func() error { return run("cache service, warm", tiers(service, client.NoLocalDir)) },
		func() error { return run("service's files, same host", tiers(service, "")) }, // found by itself
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// printDemoResults prints the paths' times side by side, and where each
// path's chunks came from.
func printDemoResults(say func(string, ...any), results []demoResult) {
	say("")
	say("%-28s %10s %10s", "path", "wall time", "vs local")
	for _, r := range results {
		say("%-28s %10v %9.2fx", r.path, r.took.Round(time.Millisecond), float64(r.took)/float64(results[0].took))
	}
	say("")
	say("Where each path's chunks came from (each path is a fresh client, as a new 'chunkd sql' process")
	say("would be; chunks are SQLite pages and the version's own chunks):")
	say("")
	say("%-28s %8s %8s %8s %8s %8s %8s %9s %8s", "path", "memory", "service", "(cached)", "(store)", "files", "store", "store MiB", "hedged")
	for _, r := range results[1:] {
		st := r.stats
		say("%-28s %8d %8d %8d %8d %8d %8d %9.1f %8d", r.path, st.Memory.Chunks, st.Service.Chunks,
			st.ServiceTiers.Disk+st.ServiceTiers.Memory+st.ServiceTiers.Partial, st.ServiceTiers.Store,
			st.LocalChunks, st.Store.Chunks-st.LocalChunks, float64(st.StoreReadBytes)/(1<<20), st.Hedged)
	}
	say("")
	say("  memory     chunks from the client's own memory (read before in the same query)")
	say("  service    chunks the cache service sent: (cached) from its memory, its disk or a file still")
	say("             downloading, (store) read through from the object store on a miss")
	say("  files      chunks read directly from the service's verified files on this host (--service-dir)")
	say("  store      chunks the client read from the object store itself, in store MiB of ranged reads")
	say("             (nearby records merged into one read, indexes included)")
	say("  hedged     chunks the service had not sent within 50 ms (--service-timeout), so the client asked")
	say("             the store as well and took whichever correct answer came first")
}
