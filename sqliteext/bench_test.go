package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
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
	chunkd, _, storeDir, svc := benchSetup(b)
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

// benchSetup builds chunkd, generates the data set and imports it into a
// folder store, and starts a cache service over it with the database's
// appendix on its disk: the chunkd binary, the SQLite file, the store's
// directory and the service.
func benchSetup(b *testing.B) (chunkd, file, storeDir string, svc *service.Service) {
	needTools(b, "sqlite3")
	ctx := context.Background()
	dir := b.TempDir()
	chunkd = filepath.Join(dir, "chunkd")
	if out, err := exec.Command("go", "build", "-o", chunkd, "../cmd/chunkd").CombinedOutput(); err != nil {
		b.Fatalf("build chunkd: %v\n%s", err, out)
	}
	file = sqltest.BenchCorpus(b, 200000)
	storeDir = filepath.Join(dir, "store")
	fs, err := folder.New(storeDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	res, err := sqlchunks.Import(ctx, fs, file, sqlchunks.ImportOptions{DB: dbName, Appendix: true})
	if err != nil {
		b.Fatal(err)
	}
	svc = startService(b, service.Config{Cache: cache.Config{Store: fs, CacheDir: filepath.Join(dir, "cache")}, Logger: slog.New(slog.DiscardHandler)})
	c := svc.Cache
	if _, err := c.GetChunk(ctx, dbName, res.Root); err != nil { // a miss: the service downloads the appendix
		b.Fatal(err)
	}
	if err := c.WaitCached(ctx, dbName, 5*time.Minute, func(ti api.TableInfo) bool { return ti.Appendix }); err != nil {
		b.Fatal(err)
	}

	return chunkd, file, storeDir, svc
}

// BenchmarkSameHost runs the seed's join on the service's host through
// the extension with a URI that names only the service (the client finds
// the service's directory and reads the version's page image), in the
// sqlite3 shell and in /usr/bin/python3, each against the same program on
// the plain local file, and the same program with the extension loaded
// but reading the local file (what loading the extension costs),
// alternately, a new process per query. It reports each side's mean CPU
// time (user+sys: on a shared machine wall time mostly measures the other
// processes) and median wall time, and the ratios of the extension's to
// the local file's (shell-cpu, shell-wall, python-cpu, python-wall).
// python-one-process measures the same in one process that loaded the
// extension once, where a new process's cost of loading a Go library
// (about 7 ms of CPU: the runtime's start, relocations, page faults) is
// paid once rather than per query.
func BenchmarkSameHost(b *testing.B) {
	needTools(b, "sqlite3", python)
	_, file, _, svc := benchSetup(b)
	query := strings.TrimSuffix(gen.SeedQuery, ";")
	u := uri(dbName, "service="+svc.URL())
	local := "file:" + file + "?mode=ro"
	shellRun := func(open string, load bool) func() (int, time.Duration, error) {
		script := fmt.Sprintf(".open %s\n.mode list\n%s;\n", open, query)
		if load {
			script = ".load " + extPath + "\n" + script
		}
		return func() (int, time.Duration, error) {
			cmd := exec.Command("sqlite3", "-batch")
			out, err := run(cmd, script)
			return strings.Count(out, "\n"), cpuTime(cmd), err
		}
	}
	pyRun := func(open string, load bool) func() (int, time.Duration, error) {
		src := "import sqlite3, sys\n"
		if load {
			src += "l = sqlite3.connect(':memory:'); l.enable_load_extension(True); l.load_extension(sys.argv[2])\n"
		}
		src += "c = sqlite3.connect(sys.argv[1], uri=True)\nprint(len(c.execute(sys.argv[3]).fetchall()))\n"
		return func() (int, time.Duration, error) {
			cmd := exec.Command(python, "-c", src, open, extPath, query)
			out, err := run(cmd, "")
			var n int
			fmt.Sscan(out, &n)
			return n, cpuTime(cmd), err
		}
	}
	// A first same-host reader has the service register the version's
	// page image; the service fills it in the background.
	if _, _, err := shellRun(u, true)(); err != nil {
		b.Fatal(err)
	}
	if err := waitImageFilled(svc.Cache.Host().Dir, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	type side struct {
		name      string
		run       func() (int, time.Duration, error)
		cpu, wall []time.Duration
	}
	for _, prog := range []struct {
		name string
		run  func(open string, load bool) func() (int, time.Duration, error)
	}{{"shell", shellRun}, {"python", pyRun}} {
		b.Run(prog.name, func(b *testing.B) {
			sides := []*side{
				{name: "local", run: prog.run(local, false)},
				{name: "loaded", run: prog.run(local, true)}, // the extension loaded, the local file read
				{name: "ext", run: prog.run(u, true)},
			}
			want := 0
			for i := 0; b.Loop(); i++ {
				for k := range sides {
					if i%2 == 1 { // alternate the order too
						k = len(sides) - 1 - k
					}
					sd := sides[k]
					start := time.Now()
					rows, cpu, err := sd.run()
					sd.wall = append(sd.wall, time.Since(start))
					sd.cpu = append(sd.cpu, cpu)
					if err != nil {
						b.Fatal(err)
					}
					if want == 0 {
						want = rows
					}
					if rows != want || rows == 0 {
						b.Fatalf("the local file and the extension give %d and %d rows", want, rows)
					}
				}
			}
			for _, sd := range sides {
				b.ReportMetric(float64(mean(sd.cpu).Microseconds())/1e3, sd.name+"-cpu-ms")
				b.ReportMetric(float64(median(sd.wall).Microseconds())/1e3, sd.name+"-wall-ms")
			}
			l, e := sides[0], sides[2]
			b.ReportMetric(float64(mean(e.cpu))/float64(mean(l.cpu)), prog.name+"-cpu")
			b.ReportMetric(float64(median(e.wall))/float64(median(l.wall)), prog.name+"-wall")
		})
	}
	// One python3 process that loaded the extension once, as an
	// application does: each round opens a connection to the local file
	// and one through the extension, alternately, and runs the query on
	// each; the process's CPU time (every thread, the library's included)
	// per query, side by side.
	b.Run("python-one-process", func(b *testing.B) {
		src := `import sqlite3, sys, time
l = sqlite3.connect(':memory:'); l.enable_load_extension(True); l.load_extension(sys.argv[1])
for i in range(int(sys.argv[5])):
    for name, uri in ((('local', sys.argv[2]), ('ext', sys.argv[3])) if i % 2 == 0 else (('ext', sys.argv[3]), ('local', sys.argv[2]))):
        t0, w0 = time.process_time(), time.perf_counter()
        c = sqlite3.connect(uri, uri=True)
        n = len(c.execute(sys.argv[4]).fetchall())
        c.close()
        print(name, n, time.process_time() - t0, time.perf_counter() - w0)
`
		n := b.N
		b.ResetTimer()
		out, err := run(exec.Command(python, "-c", src, extPath, local, u, query, fmt.Sprint(n)), "")
		if err != nil {
			b.Fatal(err)
		}
		cpu := map[string][]time.Duration{}
		wall := map[string][]time.Duration{}
		rows := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var name string
			var r int
			var c, w float64
			if _, err := fmt.Sscan(line, &name, &r, &c, &w); err != nil {
				b.Fatalf("python3 printed %q: %v", line, err)
			}
			if rows[name] != 0 && rows[name] != r || r == 0 {
				b.Fatalf("%s gave %d rows, then %d", name, rows[name], r)
			}
			rows[name] = r
			cpu[name] = append(cpu[name], time.Duration(c*1e9))
			wall[name] = append(wall[name], time.Duration(w*1e9))
		}
		if rows["local"] != rows["ext"] || len(cpu["ext"]) != n {
			b.Fatalf("the local file gave %d rows, the extension %d (%d queries of %d)", rows["local"], rows["ext"], len(cpu["ext"]), n)
		}
		for _, name := range []string{"local", "ext"} {
			b.ReportMetric(float64(mean(cpu[name]).Microseconds())/1e3, name+"-cpu-ms")
			b.ReportMetric(float64(median(wall[name]).Microseconds())/1e3, name+"-wall-ms")
		}
		b.ReportMetric(float64(mean(cpu["ext"]))/float64(mean(cpu["local"])), "python-cpu")
		b.ReportMetric(float64(median(wall["ext"]))/float64(median(wall["local"])), "python-wall")
	})
}

// cpuTime is the CPU time (user and system) a command that ran took.
func cpuTime(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// waitImageFilled waits until a page image in the cache directory dir has
// every slot filled.
func waitImageFilled(dir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ms, _ := filepath.Glob(filepath.Join(dir, api.CacheImagesDir, "*.slots"))
		for _, m := range ms {
			b, _ := os.ReadFile(m)
			full := len(b) > 0
			for i := 0; i+8 <= len(b) && full; i += 8 {
				full = binary.LittleEndian.Uint64(b[i:])&api.ImageSlotFilled != 0
			}
			if full {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no page image filled in %s after %v", dir, limit)
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

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
