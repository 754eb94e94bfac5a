package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/chunkd/chunkd/internal/bank"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/internal/killedwriter"
	"github.com/chunkd/chunkd/internal/s3test"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var binary string

func TestMain(m *testing.M) {
	killedwriter.Main() // when this process is a writer that a test kills
	bank.Main()         // when it is a bank writer or reader
	dir, err := os.MkdirTemp("", "chunkd-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "chunkd")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build chunkd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	s3test.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// service is a running "chunkd serve" process.
type serveProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	http     string // http://127.0.0.1:PORT
	grpcAddr string
	logs     *bytes.Buffer
	mu       *sync.Mutex
	done     chan error
}

var listenLine = regexp.MustCompile(`msg=listening http=(\S+) grpc=(\S+)`)

func startService(t *testing.T, storeURL, cacheDir string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--store", storeURL, "--cache-dir", cacheDir, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{t: t, cmd: cmd, logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenLine.FindStringSubmatch(line); m != nil {
				found <- m
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case m := <-found:
		s.http, s.grpcAddr = "http://"+m[1], m[2]
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("service did not start:\n%s", s.log())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

func (s *serveProc) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (s *serveProc) stop() {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Fatalf("service exited with %v:\n%s", err, s.log())
		}
	case <-time.After(30 * time.Second):
		s.t.Fatalf("service did not stop on SIGTERM:\n%s", s.log())
	}
}

func (s *serveProc) get(db string, a addr.Addr) (int, string, []byte) {
	s.t.Helper()
	resp, err := http.Get(s.http + api.ChunkPath(db, a))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(api.HeaderTier), body
}

// metric returns the value of one sample line of /metrics.
func (s *serveProc) metric(sample string) float64 {
	s.t.Helper()
	resp, err := http.Get(s.http + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func (s *serveProc) waitMetric(sample string, want float64) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.metric(sample) < want {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s never reached %v:\n%s", sample, want, s.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serviceSuite runs the service checks against one store.
func serviceSuite(t *testing.T, storeURL string) {
	ctx := context.Background()
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := testdb.MustMake(t, st, "sales", testdb.Options{Files: 3, Chunks: 200, ChunkSize: 16 << 10})
	cacheDir := t.TempDir()
	svc := startService(t, storeURL, cacheDir, "--mem", "1KiB")

	// Read-through on a miss, then the same file from disk.
	fileA := db.Files[0]
	code, tier, body := svc.get("sales", fileA.Addrs[0])
	if code != 200 || tier != "store" || !bytes.Equal(body, db.Chunks[fileA.Addrs[0]]) {
		t.Fatalf("first read: %d %s", code, tier)
	}
	svc.waitMetric(`chunkd_downloads_total{result="finished"}`, 1)
	code, tier, body = svc.get("sales", fileA.Addrs[1])
	if code != 200 || tier != "disk" || !bytes.Equal(body, db.Chunks[fileA.Addrs[1]]) {
		t.Fatalf("second read: %d %s", code, tier)
	}
	if svc.metric(`chunkd_chunk_hits_total{tier="disk"}`) < 1 {
		t.Fatal("disk hit not in metrics")
	}

	// Single flight: 100 concurrent misses on one file, one download.
	fileB := db.Files[1]
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := http.Get(svc.http + api.ChunkPath("sales", fileB.Addrs[i]))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.Equal(b, db.Chunks[fileB.Addrs[i]]) {
				t.Errorf("concurrent read %d: %d", i, resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	svc.waitMetric(`chunkd_downloads_total{result="finished"}`, 2)
	if n := svc.metric(`chunkd_downloads_total{result="started"}`); n != 2 {
		t.Fatalf("downloads started = %v after 100 concurrent misses on one file (want 1 + 1 earlier)", n)
	}

	// gRPC: one chunk, a batch, and presence.
	conn, err := grpc.NewClient(svc.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := chunkpb.NewChunkCacheClient(conn)
	a := fileA.Addrs[5]
	gr, err := gc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "sales", Address: a[:]})
	if err != nil || !gr.Found || !bytes.Equal(gr.Contents, db.Chunks[a]) || gr.Tier != chunkpb.Tier_TIER_DISK {
		t.Fatalf("grpc GetChunk: %v %v", err, gr.GetTier())
	}
	var raw [][]byte
	for _, a := range db.Files[2].Addrs {
		raw = append(raw, append([]byte(nil), a[:]...))
	}
	missing := addr.Of([]byte("missing"))
	raw = append(raw, missing[:])
	stream, err := gc.GetChunks(ctx, &chunkpb.GetChunksRequest{Db: "sales", Addresses: raw})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		rep, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		if int(rep.Index) == len(raw)-1 {
			if rep.Found {
				t.Fatal("missing chunk found")
			}
			continue
		}
		if !rep.Found || !bytes.Equal(rep.Contents, db.Chunks[addr.Addr(raw[rep.Index])]) {
			t.Fatalf("batch reply %d wrong", rep.Index)
		}
	}
	if got != len(raw) {
		t.Fatalf("batch: %d replies for %d addresses", got, len(raw))
	}
	has, err := gc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "sales", Addresses: [][]byte{a[:], missing[:]}})
	if err != nil || len(has.Present) != 2 || !has.Present[0] || has.Present[1] {
		t.Fatalf("HasChunks: %v %v", err, has.GetPresent())
	}

	// Bad input: clear 4xx.
	for _, c := range []struct{ path, want string }{
		{"/v1/dbs/sales/chunks/not-an-address", "parse address"},
		{"/v1/dbs/..%2F..%2Fetc/chunks/" + a.String(), ".."},
		{"/v1/dbs/nosuchdb/chunks/" + a.String(), "unknown database"},
	} {
		resp, err := http.Get(svc.http + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 4 || !strings.Contains(string(b), c.want) {
			t.Fatalf("GET %s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	big := bytes.Repeat([]byte{1}, (api.MaxBatch+1)*addr.Size)
	resp, err := http.Post(svc.http+api.ChunksPath("sales"), api.ContentTypeBinary, bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized batch: %d", resp.StatusCode)
	}

	// Restart keeps the cache: the downloaded files serve from disk at once.
	svc.stop()
	svc = startService(t, storeURL, cacheDir, "--mem", "1KiB")
	if _, tier, _ := svc.get("sales", fileB.Addrs[150]); tier != "disk" {
		t.Fatalf("after restart: tier %s", tier)
	}
	svc.stop()
}

func TestServeFolder(t *testing.T) {
	serviceSuite(t, filepath.Join(t.TempDir(), "store"))
}

func TestServeS3(t *testing.T) {
	srv := s3test.Shared(t)
	serviceSuite(t, srv.Bucket(t, "serve"))
}

func TestServeEviction(t *testing.T) {
	ctx := context.Background()
	storeURL := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.MustMake(t, st, "db", testdb.Options{Files: 3, Chunks: 100, ChunkSize: 8 << 10})
	limit := db.Files[0].Size * 3 / 2
	svc := startService(t, storeURL, t.TempDir(), "--disk", strconv.FormatInt(limit, 10), "--fsync=false")
	for i, f := range db.Files {
		// The first file downloads on its first miss (it fits); the others
		// once the bytes read through for them reach their size.
		for n := 0; svc.metric(`chunkd_downloads_total{result="started"}`) < float64(i+1); n++ {
			if n > 3*len(f.Addrs) {
				t.Fatalf("file %d: no download after %d reads through:\n%s", i, n, svc.log())
			}
			svc.get("db", f.Addrs[n%len(f.Addrs)])
		}
		svc.waitMetric(`chunkd_downloads_total{result="finished"}`, float64(i+1))
	}
	if ev := svc.metric("chunkd_evictions_total"); ev != 2 {
		t.Fatalf("evictions = %v", ev)
	}
	if used := svc.metric("chunkd_disk_bytes"); used > float64(limit) {
		t.Fatalf("disk bytes %v over --disk %d", used, limit)
	}
	svc.stop()
}

func TestServeStoreDown(t *testing.T) {
	srv := s3test.Start(t) // its own server: this test stops it
	storeURL := srv.Bucket(t, "down")
	ctx := context.Background()
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.MustMake(t, st, "db", testdb.Options{Files: 2, Chunks: 50})
	svc := startService(t, storeURL, t.TempDir(), "--store-timeout", "2s")
	svc.get("db", db.Files[0].Addrs[0])
	svc.waitMetric(`chunkd_downloads_total{result="finished"}`, 1)
	srv.Stop()
	if code, tier, _ := svc.get("db", db.Files[0].Addrs[9]); code != 200 || tier != "disk" {
		t.Fatalf("cached chunk with the store down: %d %s", code, tier)
	}
	start := time.Now()
	code, _, body := svc.get("db", db.Files[1].Addrs[0])
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "unreachable") {
		t.Fatalf("miss with the store down: %d %s", code, body)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("miss took %v with --store-timeout 2s", d)
	}
	svc.stop()
}
