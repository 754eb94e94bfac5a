package main

import (
	"context"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
)

// The fault campaign of issue 10 against the real binary: kill -9 during
// downloads, a soak with a working set twice --disk, a cache directory on
// a file system too small for a file. Bounded in count and time.

// makeStore makes a folder store holding database "db".
func makeStore(t *testing.T, o testdb.Options) (string, *testdb.DB) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.MustMake(t, st, "db", o)
	st.Close()
	return dir, db
}

// checkAll reads every chunk of db and fails on anything but its bytes.
func (s *serveProc) checkAll(db *testdb.DB) {
	s.t.Helper()
	for a, want := range db.Chunks {
		code, tier, body := s.get("db", a)
		if code != http.StatusOK || string(body) != string(want) {
			s.t.Fatalf("chunk %s: %d from %q, %d bytes (want %d):\n%s", a, code, tier, len(body), len(want), s.log())
		}
	}
}

// kill sends SIGKILL and waits for the process to go.
func (s *serveProc) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// TestKillDuringDownloads kills the service with SIGKILL at random
// moments while files download from a slow store, restarts it, and reads
// everything back: nothing lost or wrong, tmp/ empty after each start.
func TestKillDuringDownloads(t *testing.T) {
	dir, db := makeStore(t, testdb.Options{Files: 4, Chunks: 200, ChunkSize: 8 << 10})
	// 1.6 MB files at 4 MB/s: each download takes a while.
	storeURL := "file://" + dir + "?bandwidth=4MB"
	cacheDir := t.TempDir()
	rng := rand.New(rand.NewSource(1))
	const kills = 6
	for i := 0; i < kills; i++ {
		svc := startService(t, storeURL, cacheDir, "--mem", "1KiB")
		if tmps, _ := os.ReadDir(filepath.Join(cacheDir, api.CacheTmpDir)); len(tmps) != 0 {
			t.Fatalf("start %d: tmp/ holds %d files", i, len(tmps))
		}
		for _, f := range db.Files { // start every download
			svc.get("db", f.Addrs[rng.Intn(len(f.Addrs))])
		}
		time.Sleep(time.Duration(50+rng.Intn(600)) * time.Millisecond)
		svc.kill()
	}
	svc := startService(t, storeURL, cacheDir, "--mem", "1KiB")
	svc.checkAll(db)
	// Whatever was committed before a kill passes its checks.
	if c := svc.metric("chunkd_corrupt_files_total"); c != 0 {
		t.Fatalf("%v cached files failed their checks after kills:\n%s", c, svc.log())
	}
	svc.stop()
}

// TestKillMidStream kills the service with SIGKILL while it streams a
// whole table file to a client (a Dolt remote's download) from a download
// of its own still in flight from a slow store: the client sees a broken
// transfer, never a wrong byte, and a service restarted on the directory
// serves every chunk.
func TestKillMidStream(t *testing.T) {
	dir, db := makeStore(t, testdb.Options{Files: 1, Chunks: 800, ChunkSize: 8 << 10})
	file := db.Files[0]
	want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file.Key)))
	if err != nil {
		t.Fatal(err)
	}
	// 3.5 MB at 1 MB/s a stream: each range the service reads takes
	// about a second a MB.
	storeURL := "file://" + dir + "?latency=5ms&bandwidth=1MB"
	rng := rand.New(rand.NewSource(2))
	var cacheDir string
	for i := range 4 {
		cacheDir = t.TempDir()
		svc := startService(t, storeURL, cacheDir, "--mem", "1KiB")
		resp, err := http.Get(svc.http + "/dolt/v1/db/" + file.Name)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(want)) {
			t.Fatalf("download %d: %s, %d bytes", i, resp.Status, resp.ContentLength)
		}
		killed := make(chan struct{})
		time.AfterFunc(time.Duration(150+rng.Intn(700))*time.Millisecond, func() { svc.kill(); close(killed) })
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("download %d: the whole file came before the kill (%d bytes): make the store slower", i, len(got))
		}
		if len(got) > len(want) || string(got) != string(want[:len(got)]) {
			t.Fatalf("download %d: %d bytes before the break, not the file's first %d", i, len(got), len(got))
		}
		t.Logf("download %d: broken after %d of %d bytes: %v", i, len(got), len(want), err)
		<-killed
	}
	svc := startService(t, storeURL, cacheDir, "--mem", "1KiB")
	if tmps, _ := os.ReadDir(filepath.Join(cacheDir, api.CacheTmpDir)); len(tmps) != 0 {
		t.Fatalf("tmp/ holds %d files after the restart", len(tmps))
	}
	svc.checkAll(db)
	svc.stop()
}

// soakDuration is how long TestSoak runs: CHUNKD_SOAK (a Go duration),
// else 60 s; `CHUNKD_SOAK=10m go test -run TestSoak ./cmd/chunkd` runs the
// long form.
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("CHUNKD_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHUNKD_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 60 * time.Second
}

// TestSoak reads random chunks with 16 clients from a working set twice
// --disk: every byte is right, the store bytes read per byte served stay
// at most 3 (admission keeps whole-file downloads from thrashing), and
// the service's RSS and goroutines stay flat.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the soak runs for a minute")
	}
	dir, db := makeStore(t, testdb.Options{Files: 24, Chunks: 128, ChunkSize: 16 << 10})
	var total int64
	for _, f := range db.Files {
		total += f.Size
	}
	svc := startService(t, dir, t.TempDir(), "--mem", "4MiB", "--disk", strconv.FormatInt(total/2, 10), "--fsync=false")
	all := db.All()
	duration := soakDuration(t)
	deadline := time.Now().Add(duration)
	var reads, wrong atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for time.Now().Before(deadline) {
				a := all[rng.Intn(len(all))]
				resp, err := client.Get(svc.http + api.ChunkPath("db", a))
				if err != nil {
					wrong.Add(1)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || addr.Of(body) != a {
					wrong.Add(1)
				}
				reads.Add(1)
			}
		}(int64(w))
	}
	// Sample the service's memory and goroutines through the run.
	type sample struct{ rss, goroutines float64 }
	var samples []sample
	for time.Now().Before(deadline) {
		time.Sleep(duration / 12)
		samples = append(samples, sample{svc.metric("process_resident_memory_bytes"), svc.metric("go_goroutines")})
	}
	wg.Wait()
	ratio := svc.metric("chunkd_store_bytes_per_served_byte")
	t.Logf("soak %v: %d reads, working set %d MiB, --disk %d MiB; store bytes per byte served %.2f; downloads %v, evictions %v; RSS/goroutines %v",
		duration, reads.Load(), total>>20, total>>21, ratio, svc.metric(`chunkd_downloads_total{result="finished"}`), svc.metric("chunkd_evictions_total"), samples)
	if wrong.Load() != 0 {
		t.Fatalf("%d of %d reads failed or were wrong:\n%s", wrong.Load(), reads.Load(), svc.log())
	}
	if ratio > 3 || ratio == 0 {
		t.Fatalf("store bytes per byte served %.2f, want at most 3", ratio)
	}
	// Flat: the last third of the run uses no more than the first third
	// (after warm-up) allows, with room for the runtime's noise.
	n := len(samples)
	if n >= 6 {
		early, late := samples[n/3], samples[n-1]
		if late.rss > early.rss*1.5+16<<20 || late.goroutines > early.goroutines+20 {
			t.Fatalf("not flat: at a third %+v, at the end %+v", early, late)
		}
	}
	svc.stop()
}

// TestSmallFileSystem: a cache directory on a file system smaller than a
// file (--disk much larger) never empties the cache for a download that
// cannot fit: the file is read through, the file that fits stays cached.
// It mounts a 3 MiB tmpfs, which needs root; elsewhere the in-process
// tests inject ENOSPC instead (cache.TestFileSystemFull).
func TestSmallFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root; cache.TestFileSystemFull covers ENOSPC by injection")
	}
	cacheDir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", cacheDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); cache.TestFileSystemFull covers ENOSPC by injection", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", cacheDir).Run() })
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	small := testdb.MustMake(t, st, "small", testdb.Options{Chunks: 100, ChunkSize: 8 << 10})
	big := testdb.MustMake(t, st, "big", testdb.Options{Chunks: 400, ChunkSize: 16 << 10, Seed: 2})
	st.Close()
	svc := startService(t, dir, cacheDir, "--disk", "1GiB", "--mem", "1KiB", "--fsync=false")
	svc.get("small", small.Files[0].Addrs[0])
	svc.waitMetric(`chunkd_downloads_total{result="finished"}`, 1)
	for i := 0; i < 3; i++ { // misses on the file that cannot fit, again and again
		for _, a := range big.Files[0].Addrs {
			if code, _, body := svc.get("big", a); code != 200 || addr.Of(body) != a {
				t.Fatalf("big file's chunk: %d", code)
			}
		}
	}
	if ev := svc.metric("chunkd_evictions_total"); ev != 0 {
		t.Fatalf("a download that cannot fit evicted %v files:\n%s", ev, svc.log())
	}
	if _, tier, _ := svc.get("small", small.Files[0].Addrs[5]); tier != "disk" {
		t.Fatalf("the file that fits: %s", tier)
	}
	if !strings.Contains(svc.log(), "cannot fit") {
		t.Fatalf("no log line says the big file cannot fit:\n%s", svc.log())
	}
}
