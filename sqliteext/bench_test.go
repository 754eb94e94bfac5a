package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/internal/sqltest"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store/folder"
)

// BenchmarkSeedJoin runs the seed's join (gen.SeedQuery) through the
// extension in the sqlite3 shell and through "chunkd sql", on the same
// path, alternately, each a new process per query (as a user runs them):
//
//   - store: a folder store read directly (no service);
//   - service: an in-process cache service with the database on its disk.
//
// It reports the median wall time of each (ext-ms, sql-ms) and their
// ratio (ext/sql). The data set is gen.Sentences with
// CHUNKD_BENCH_SENTENCES sentences (default 200000, about 32 MB; the
// demo's size) and twice as many translations.
func BenchmarkSeedJoin(b *testing.B) {
	needTools(b, "sqlite3")
	ctx := context.Background()
	dir := b.TempDir()
	chunkd := filepath.Join(dir, "chunkd")
	if out, err := exec.Command("go", "build", "-o", chunkd, "../cmd/chunkd").CombinedOutput(); err != nil {
		b.Fatalf("build chunkd: %v\n%s", err, out)
	}
	file := sqltest.BenchCorpus(b, 200000)
	storeDir := filepath.Join(dir, "store")
	fs, err := folder.New(storeDir)
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	res, err := sqlchunks.Import(ctx, fs, file, sqlchunks.ImportOptions{DB: dbName, Appendix: true})
	if err != nil {
		b.Fatal(err)
	}
	svc := startService(b, service.Config{Cache: cache.Config{Store: fs, CacheDir: filepath.Join(dir, "cache")}, Logger: slog.New(slog.DiscardHandler)})
	c := svc.Cache
	if _, err := c.GetChunk(ctx, dbName, res.Root); err != nil { // a miss: the service downloads the appendix
		b.Fatal(err)
	}
	if err := c.WaitCached(ctx, dbName, 5*time.Minute, func(ti api.TableInfo) bool { return ti.Appendix }); err != nil {
		b.Fatal(err)
	}

	query := strings.TrimSuffix(gen.SeedQuery, ";")
	for _, p := range []struct {
		name string
		uri  string
		sql  []string
	}{
		{"store", uri(dbName, "store="+storeDir), []string{"--store", storeDir}},
		{"service", uri(dbName, "service="+svc.URL(), "store="+storeDir), []string{"--store", storeDir, "--service", svc.URL()}},
	} {
		ext := func() (int, error) {
			out, err := run(exec.Command("sqlite3", "-batch"), fmt.Sprintf(".load %s\n.open %s\n.mode list\n%s;\n", extPath, p.uri, query))
			return strings.Count(out, "\n"), err
		}
		sql := func() (int, error) {
			args := append([]string{"sql", "--db", dbName, "-q", query, "--format", "csv"}, p.sql...)
			out, err := run(exec.Command(chunkd, args...), "")
			return strings.Count(out, "\n") - 1, err // less the header
		}
		b.Run(p.name, func(b *testing.B) {
			var extTimes, sqlTimes []time.Duration
			want := 0
			for b.Loop() {
				for _, side := range []struct {
					run   func() (int, error)
					times *[]time.Duration
				}{{ext, &extTimes}, {sql, &sqlTimes}} {
					start := time.Now()
					rows, err := side.run()
					*side.times = append(*side.times, time.Since(start))
					if err != nil {
						b.Fatal(err)
					}
					if want == 0 {
						want = rows
					}
					if rows != want || rows == 0 {
						b.Fatalf("the two give %d and %d rows", want, rows)
					}
				}
			}
			e, s := median(extTimes), median(sqlTimes)
			b.ReportMetric(float64(e.Microseconds())/1e3, "ext-ms")
			b.ReportMetric(float64(s.Microseconds())/1e3, "sql-ms")
			b.ReportMetric(float64(e)/float64(s), "ext/sql")
		})
	}
}

// run runs cmd with stdin and returns its stdout.
func run(cmd *exec.Cmd, stdin string) (string, error) {
	var out, errOut bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || strings.Contains(errOut.String(), "rror") {
		return "", fmt.Errorf("%s: %v: %s", cmd.Path, err, errOut.String())
	}
	return out.String(), nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
