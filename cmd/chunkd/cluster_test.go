package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/cluster/ring"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/store"
)

// clusterRemotes are the Dolt remotes in testdata a cluster test reads:
// every chunk of each, through the nodes.
var clusterRemotes = []string{"remote-classic", "remote-archive"}

// clusterStore copies the remotes into a folder store and returns it with
// every chunk address per database and the bytes of their table files.
func clusterStore(t *testing.T) (dir string, chunks map[string][]addr.Addr, fileBytes int64) {
	t.Helper()
	dir = t.TempDir()
	chunks = map[string][]addr.Addr{}
	for _, db := range clusterRemotes {
		src := doltfixtures.Path(db)
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, db), 0o755)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".chunks.tsv") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, db, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if e.Name() != "manifest" {
				fileBytes += int64(len(b))
			}
		}
		for a := range doltfixtures.DirChunks(t, src) {
			chunks[db] = append(chunks[db], a)
		}
	}
	return dir, chunks, fileBytes
}

// freePorts returns n TCP ports free on loopback a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// node is one chunkd serve process of a test cluster.
type node struct {
	*serveProc
	id   string
	port int
}

// startNode starts node id on port with the cluster flags given.
func startNode(t *testing.T, storeURL, id string, port int, cluster ...string) *node {
	t.Helper()
	args := append([]string{"--node-id", id, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, cluster...)
	s := startService(t, storeURL, filepath.Join(t.TempDir(), id), args...)
	return &node{serveProc: s, id: id, port: port}
}

// startCluster starts n nodes listing each other with --peers, and waits
// until each sees all of them up.
func startCluster(t *testing.T, storeURL string, n int, extra ...string) ([]*node, string) {
	t.Helper()
	ports := freePorts(t, n)
	var urls []string
	for _, p := range ports {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	peers := strings.Join(urls, ",")
	var nodes []*node
	for i, p := range ports {
		nodes = append(nodes, startNode(t, storeURL, fmt.Sprintf("node-%d", i), p, append([]string{"--peers", peers}, extra...)...))
	}
	waitMembers(t, nodes, n)
	return nodes, peers
}

// clusterInfo asks a node for GET /v1/cluster.
func clusterInfo(t *testing.T, base string) api.ClusterInfo {
	t.Helper()
	resp, err := http.Get(base + api.ClusterPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info api.ClusterInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}

func upCount(info api.ClusterInfo) int {
	n := 0
	for _, m := range info.Members {
		if m.State == api.MemberUp {
			n++
		}
	}
	return n
}

// waitMembers waits until every node sees want members up.
func waitMembers(t *testing.T, nodes []*node, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, nd := range nodes {
		for upCount(clusterInfo(t, nd.http)) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %+v, want %d up:\n%s", nd.id, clusterInfo(t, nd.http), want, nd.log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// readBatch reads as of db through the node at base with one batch
// request, checking every chunk against its address; it returns how many
// were wrong (bytes that do not hash to the address) and an error for a
// failed request or a chunk not found.
func readBatch(hc *http.Client, base, db string, as []addr.Addr) (wrong int, err error) {
	resp, err := hc.Post(base+api.ChunksPath(db), api.ContentTypeBinary, bytes.NewReader(api.EncodeAddresses(as)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%s: %s", resp.Status, msg)
	}
	got := 0
	for f, err := range api.NewFrameReader(resp.Body).All() {
		if err != nil {
			return wrong, err
		}
		if !f.Found {
			return wrong, fmt.Errorf("chunk %s of %s not found", as[f.Index], db)
		}
		if addr.Of(f.Data) != as[f.Index] {
			wrong++
		}
		got++
	}
	if got != len(as) {
		return wrong, fmt.Errorf("%d of %d chunks answered", got, len(as))
	}
	return wrong, nil
}

// storm has clients read every chunk of every database, each through the
// node picked for it, in batches of batch in an order of its own.
func storm(t *testing.T, nodes []*node, clients, batch int, chunks map[string][]addr.Addr, pick func(client int) string) (wrong, failed int64) {
	t.Helper()
	var wg sync.WaitGroup
	var w, f atomic.Int64
	for c := range clients {
		wg.Go(func() {
			hc := &http.Client{Timeout: 30 * time.Second}
			r := rand.New(rand.NewPCG(uint64(c), 1))
			for _, db := range clusterRemotes {
				as := append([]addr.Addr(nil), chunks[db]...)
				r.Shuffle(len(as), func(i, j int) { as[i], as[j] = as[j], as[i] })
				for lo := 0; lo < len(as); lo += batch {
					n, err := readBatch(hc, pick(c), db, as[lo:min(lo+batch, len(as))])
					w.Add(int64(n))
					if err != nil {
						f.Add(1)
						t.Logf("client %d: %v", c, err)
					}
				}
			}
		})
	}
	wg.Wait()
	return w.Load(), f.Load()
}

func sumMetric(nodes []*node, sample string) float64 {
	var sum float64
	for _, nd := range nodes {
		sum += nd.metric(sample)
	}
	return sum
}

// TestClusterColdStorm: 16 clients spread over 3 nodes read every chunk
// of the Dolt remotes in testdata, all cold: the three nodes together read
// each file from the store about once (at most 1.1x the files' bytes;
// three services alone would read each three times).
func TestClusterColdStorm(t *testing.T) {
	dir, chunks, fileBytes := clusterStore(t)
	nodes, _ := startCluster(t, dir+"?latency=30ms", 3)
	wrong, failed := storm(t, nodes, 16, 256, chunks, func(c int) string { return nodes[c%3].http })
	time.Sleep(6 * time.Second) // the shared reads linger 5 s before they count what no download took
	if wrong != 0 || failed != 0 {
		t.Fatalf("%d wrong chunks, %d failed batches", wrong, failed)
	}
	storeBytes := sumMetric(nodes, "chunkd_store_bytes_total") + sumMetric(nodes, "chunkd_cluster_stream_bytes_total")
	ratio := storeBytes / float64(fileBytes)
	t.Logf("store bytes %v for %d bytes of files: %.3fx; forwarded reads answered by peers %v, by the store %v+%v", storeBytes, fileBytes, ratio,
		sumMetric(nodes, `chunkd_cluster_forwards_total{result="peer"}`), sumMetric(nodes, `chunkd_cluster_forwards_total{result="store"}`), sumMetric(nodes, `chunkd_cluster_forwards_total{result="hedge_store"}`))
	if ratio > 1.1 {
		for _, nd := range nodes {
			t.Logf("%s: %v store bytes\n%s", nd.id, nd.metric("chunkd_store_bytes_total"), nd.log())
		}
		t.Fatalf("the cluster read %.3fx the files' bytes from the store, want at most 1.1x", ratio)
	}
}

// readLoad has clients read random chunks through ring-aware Go clients
// (service only, each entering by the node picked for it) until stop is
// closed, recording each read's time and outcome.
type readLoad struct {
	mu      sync.Mutex
	reads   []loadRead
	wrong   atomic.Int64
	clients []*client.Client
}

type loadRead struct {
	start, end time.Time
	err        error
}

func startLoad(t *testing.T, entries []string, clients int, chunks map[string][]addr.Addr, stop <-chan struct{}) (*readLoad, *sync.WaitGroup) {
	t.Helper()
	l := &readLoad{}
	var wg sync.WaitGroup
	for c := range clients {
		db := clusterRemotes[c%len(clusterRemotes)]
		cl, err := client.Open(context.Background(), client.Options{Service: entries[c%len(entries)], DB: db, MemBytes: -1, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		l.clients = append(l.clients, cl)
		t.Cleanup(func() { cl.Close() })
		as := chunks[db]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := as[r.IntN(len(as))]
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				start := time.Now()
				data, err := cl.Get(ctx, a)
				cancel()
				if err == nil && addr.Of(data) != a {
					l.wrong.Add(1)
				}
				l.mu.Lock()
				l.reads = append(l.reads, loadRead{start, time.Now(), err})
				l.mu.Unlock()
			}
		})
	}
	return l, &wg
}

// since returns the reads that started at or after t0 (and before t1,
// if not zero).
func (l *readLoad) between(t0, t1 time.Time) []loadRead {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loadRead
	for _, r := range l.reads {
		if !r.start.Before(t0) && (t1.IsZero() || r.start.Before(t1)) {
			out = append(out, r)
		}
	}
	return out
}

func failures(rs []loadRead) int {
	n := 0
	for _, r := range rs {
		if r.err != nil {
			n++
		}
	}
	return n
}

func percentile(rs []loadRead, p float64) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = r.end.Sub(r.start)
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// warm reads every chunk once through every node, so the load that
// follows is warm.
func warmCluster(t *testing.T, nodes []*node, chunks map[string][]addr.Addr) {
	t.Helper()
	if wrong, failed := storm(t, nodes, len(nodes), 512, chunks, func(c int) string { return nodes[c].http }); wrong+failed != 0 {
		t.Fatalf("warming: %d wrong, %d failed", wrong, failed)
	}
}

// TestClusterKill: 16 clients read through 3 nodes; one is killed with
// SIGKILL. No read returns a wrong byte, and no more reads fail than were
// in flight at the kill (the clients fail over to the next node by the
// placement, which reads the dead node's files from the store).
func TestClusterKill(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	nodes, _ := startCluster(t, dir+"?latency=10ms", 3)
	warmCluster(t, nodes, chunks)
	var entries []string
	for _, nd := range nodes {
		entries = append(entries, nd.http)
	}
	stop := make(chan struct{})
	load, wg := startLoad(t, entries, 16, chunks, stop)
	time.Sleep(time.Second)
	kill := time.Now()
	nodes[2].cmd.Process.Signal(syscall.SIGKILL)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	before, after := load.between(time.Time{}, kill), load.between(kill, time.Time{})
	inFlight := 0
	for _, r := range before {
		if r.end.After(kill) {
			inFlight++
		}
	}
	failed := failures(before) + failures(after)
	t.Logf("reads before the kill %d (failed %d), in flight at it %d, after it %d (failed %d, p50 %v, p99 %v); wrong %d",
		len(before), failures(before), inFlight, len(after), failures(after), percentile(after, 0.5), percentile(after, 0.99), load.wrong.Load())
	if load.wrong.Load() != 0 {
		t.Fatalf("%d reads returned wrong bytes", load.wrong.Load())
	}
	if failed > inFlight {
		for _, r := range append(before, after...) {
			if r.err != nil {
				t.Log(r.err)
			}
		}
		t.Fatalf("%d reads failed, more than the %d in flight at the kill", failed, inFlight)
	}
	if len(after) < 100 {
		t.Fatalf("only %d reads after the kill", len(after))
	}
}

// TestClusterStop: one of 3 nodes is stopped (SIGSTOP) under 16 clients:
// every read still succeeds, and the slowest are bounded by the hedge
// deadlines (the client's 250 ms for the next node, the node's
// --peer-hedge for the store), not by a timeout.
func TestClusterStop(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	nodes, _ := startCluster(t, dir+"?latency=10ms", 3, "--peer-hedge", "200ms")
	warmCluster(t, nodes, chunks)
	stop := make(chan struct{})
	load, wg := startLoad(t, []string{nodes[0].http, nodes[1].http}, 16, chunks, stop)
	time.Sleep(time.Second)
	frozen := time.Now()
	nodes[2].cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { nodes[2].cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	nodes[2].cmd.Process.Signal(syscall.SIGCONT)
	after := load.between(frozen, time.Time{})
	p50, p99, worst := percentile(after, 0.5), percentile(after, 0.99), percentile(after, 1)
	t.Logf("reads after SIGSTOP %d, failed %d, p50 %v, p99 %v, slowest %v; wrong %d", len(after), failures(after), p50, p99, worst, load.wrong.Load())
	if load.wrong.Load() != 0 || failures(after) != 0 {
		t.Fatalf("%d wrong, %d failed", load.wrong.Load(), failures(after))
	}
	if bound := 250*time.Millisecond + 200*time.Millisecond + 550*time.Millisecond; p99 > bound {
		t.Fatalf("p99 %v after SIGSTOP, over the hedge bound %v", p99, bound)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cachedFiles returns the table files of db a node keeps on disk.
func cachedFiles(t *testing.T, base, db string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + api.DBPath(db))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info api.DBInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, ti := range info.Tables {
		if ti.State == api.StateCached {
			out[ti.Name] = true
		}
	}
	return out
}

// TestClusterJoin: a fourth node joins three that hold a database of 40
// files: it takes about a quarter of them, exactly those the placement
// gives it, and the others download nothing more.
func TestClusterJoin(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.MustMake(t, st, "many", testdb.Options{Files: 40, Chunks: 16, ChunkSize: 1024})
	chunks := map[string][]addr.Addr{"many": db.All()}
	read := func(nodes []*node) {
		t.Helper()
		for _, nd := range nodes {
			if _, err := readBatch(http.DefaultClient, nd.http, "many", db.All()); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle := func(nodes []*node, want int) []map[string]bool {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var sets []map[string]bool
			total := 0
			for _, nd := range nodes {
				s := cachedFiles(t, nd.http, "many")
				sets = append(sets, s)
				total += len(s)
			}
			if total >= want || time.Now().After(deadline) {
				return sets
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ports := freePorts(t, 4)
	var urls []string
	for _, p := range ports {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, startNode(t, dir, fmt.Sprintf("node-%d", i), ports[i], "--peers", strings.Join(urls[:3], ",")))
	}
	waitMembers(t, nodes, 3)
	read(nodes)
	before := settle(nodes, 40)
	for i, s := range before {
		t.Logf("node-%d keeps %d files", i, len(s))
	}
	nodes = append(nodes, startNode(t, dir, "node-3", ports[3], "--peers", strings.Join(urls, ",")))
	waitMembers(t, nodes, 4)
	read(nodes)
	after := settle(nodes, 40+1)
	time.Sleep(500 * time.Millisecond)
	after = settle(nodes, 40+len(after[3]))
	four := ring.New([]ring.Member{{ID: "node-0", Weight: 1}, {ID: "node-1", Weight: 1}, {ID: "node-2", Weight: 1}, {ID: "node-3", Weight: 1}})
	want := 0
	for _, f := range db.Files {
		if four.Owner(f.Key) == "node-3" {
			want++
			if !after[3][f.Name] {
				t.Errorf("file %s is node-3's by the placement but it did not download it", f.Name)
			}
		}
	}
	for i := range 3 {
		if len(after[i]) != len(before[i]) {
			t.Errorf("node-%d kept %d files before the join and %d after: it downloaded files it no longer owns", i, len(before[i]), len(after[i]))
		}
	}
	moved := float64(len(after[3])) / float64(len(db.Files))
	t.Logf("the fourth node took %d of %d files (%.2f; the placement gives it %d)", len(after[3]), len(db.Files), moved, want)
	if len(after[3]) != want || moved < 0.1 || moved > 0.45 {
		t.Fatalf("the fourth node took %d files (%.2f of them), want the %d the placement gives it, about a quarter", len(after[3]), moved, want)
	}
	_ = chunks
}

// TestClusterRollingRestart: each of 3 nodes in turn is stopped (SIGTERM)
// and started again with its cache directory, under 16 clients: no read
// fails.
func TestClusterRollingRestart(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	storeURL := dir + "?latency=10ms"
	ports := freePorts(t, 3)
	var urls []string
	for _, p := range ports {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	peers := strings.Join(urls, ",")
	cacheDirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	start := func(i int) *node {
		s := startService(t, storeURL, cacheDirs[i], "--node-id", fmt.Sprintf("node-%d", i), "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--peers", peers)
		return &node{serveProc: s, id: fmt.Sprintf("node-%d", i), port: ports[i]}
	}
	nodes := []*node{start(0), start(1), start(2)}
	waitMembers(t, nodes, 3)
	warmCluster(t, nodes, chunks)
	stop := make(chan struct{})
	load, wg := startLoad(t, urls, 16, chunks, stop)
	for i := range nodes {
		time.Sleep(500 * time.Millisecond)
		nodes[i].stop()
		nodes[i] = start(i)
		waitMembers(t, nodes, 3)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	all := load.between(time.Time{}, time.Time{})
	t.Logf("%d reads over the rolling restart, %d failed, %d wrong, p99 %v", len(all), failures(all), load.wrong.Load(), percentile(all, 0.99))
	if failures(all) != 0 || load.wrong.Load() != 0 {
		for _, r := range all {
			if r.err != nil {
				t.Log(r.err)
			}
		}
		t.Fatalf("%d reads failed, %d wrong", failures(all), load.wrong.Load())
	}
}

// TestClusterGossip: nodes that know only one gossip address (--join)
// find each other, and when one stops the others take it out at once (it
// leaves the gossip), then serve its files themselves.
func TestClusterGossip(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	ports := freePorts(t, 6)
	gossip := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[3+i]) }
	var nodes []*node
	for i := range 3 {
		args := []string{"--gossip-listen", gossip(i)}
		if i > 0 {
			args = append(args, "--join", gossip(0))
		}
		nodes = append(nodes, startNode(t, dir, fmt.Sprintf("node-%d", i), ports[i], args...))
	}
	waitMembers(t, nodes, 3)
	for _, m := range clusterInfo(t, nodes[1].http).Members {
		if m.Source != "self" && m.Source != "gossip" && m.Source != "hello" {
			t.Errorf("member %s found by %q", m.ID, m.Source)
		}
	}
	warmCluster(t, nodes, chunks)
	nodes[2].stop()
	deadline := time.Now().Add(10 * time.Second)
	for upCount(clusterInfo(t, nodes[0].http)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("node-0 still sees %+v", clusterInfo(t, nodes[0].http))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if wrong, failed := storm(t, nodes[:2], 2, 512, chunks, func(c int) string { return nodes[c].http }); wrong+failed != 0 {
		t.Fatalf("after node-2 left: %d wrong, %d failed", wrong, failed)
	}
}

// TestClusterRingClient: a Go client that enters by one node reads each
// chunk from its file's owner (no node forwards a read), and one told not
// to route (NoRouting) costs one forward per chunk of another node's file.
func TestClusterRingClient(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	nodes, _ := startCluster(t, dir, 3, "--mem", "1KiB") // no memory tier: a node's reads of others' files are forwarded
	warmCluster(t, nodes, chunks)
	forwards := func() float64 {
		return sumMetric(nodes, `chunkd_cluster_forwards_total{result="peer"}`) + sumMetric(nodes, `chunkd_cluster_forwards_total{result="store"}`) + sumMetric(nodes, `chunkd_cluster_forwards_total{result="hedge_store"}`)
	}
	for _, noRouting := range []bool{false, true} {
		cl, err := client.Open(context.Background(), client.Options{Service: nodes[0].http, DB: "remote-classic", MemBytes: -1, NoRouting: noRouting, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		as := chunks["remote-classic"]
		if _, err := cl.Get(context.Background(), as[0]); err != nil { // its answer says "cluster"
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the members and the routing table arrive
		before := forwards()
		for _, a := range as {
			data, err := cl.Get(context.Background(), a)
			if err != nil || addr.Of(data) != a {
				t.Fatalf("%s: %v", a, err)
			}
		}
		extra := forwards() - before
		cl.Close()
		t.Logf("NoRouting %v: %d reads, %v forwarded by a node", noRouting, len(as), extra)
		if !noRouting && extra != 0 {
			t.Fatalf("a routing client's reads were forwarded %v times", extra)
		}
		if noRouting && extra == 0 {
			t.Fatalf("no read of a client that does not route was forwarded: the test shows nothing")
		}
	}
}

// TestClusterSecret: nodes that share --cluster-secret-file forward reads
// to each other (their requests signed), with no refused peer read; a
// peer read without the signature, as any client on the network could
// send, is refused (403) and serves no byte.
func TestClusterSecret(t *testing.T) {
	dir, chunks, _ := clusterStore(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a cluster secret of 32 characters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes, _ := startCluster(t, dir, 2, "--cluster-secret-file", secret)
	// Every chunk through node 1: what node 0 owns is forwarded to it.
	wrong, failed := storm(t, nodes, 2, 256, chunks, func(int) string { return nodes[1].http })
	if wrong != 0 || failed != 0 {
		t.Fatalf("reads through one node of a cluster with a secret: %d wrong, %d failed batches", wrong, failed)
	}
	forwarded := nodes[1].metric(`chunkd_cluster_forwards_total{result="peer"}`)
	servedOK := nodes[0].metric(`chunkd_cluster_peer_reads_total{result="ok"}`)
	if forwarded == 0 || servedOK == 0 || nodes[0].metric(`chunkd_cluster_peer_reads_total{result="refused"}`) != 0 {
		t.Fatalf("node 1 forwarded %v reads to its peer, node 0 served %v and refused %v; want some forwarded and served, none refused",
			forwarded, servedOK, nodes[0].metric(`chunkd_cluster_peer_reads_total{result="refused"}`))
	}
	// An unsigned peer read, and a hello, from outside the cluster.
	resp, err := http.Get(nodes[0].http + "/v1/cluster/read?key=x&off=0&n=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "peer credential") {
		t.Errorf("an unsigned peer read: %s %s; want 403 naming the missing peer credential", resp.Status, body)
	}
	resp, err = http.Post(nodes[0].http+"/v1/cluster/hello", api.ContentTypeJSON, strings.NewReader(`{"id":"intruder","url":"http://127.0.0.1:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("an unsigned hello: %s; want it refused", resp.Status)
	}
	if up := upCount(clusterInfo(t, nodes[0].http)); up != 2 {
		t.Errorf("node 0 sees %d members up after an unsigned hello, want 2", up)
	}
}
