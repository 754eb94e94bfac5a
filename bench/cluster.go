package bench

import (
	"bufio"
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
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/internal/doltfixtures"
)

// The cluster suite: N chunkd serve processes on this machine made one
// cache with --peers (package cluster), over a folder copy of the Dolt
// remotes in testdata behind the emulated store round trip, and one
// service alone beside them for comparison, all in the same run:
//
//   - cold: 16 clients spread over the nodes read every chunk of every
//     remote at once (batches of 256, an order each): the store bytes the
//     nodes read, summed, per byte of the files; the service alone, the
//     same storm;
//   - warm: single-chunk reads, for a fixed time, by clients that route by
//     the placement, by clients that enter by one node and do not (a node
//     forwards reads of files it does not own: extra hops per read), and
//     against the service alone;
//   - kill: the routing clients again, and one node killed with SIGKILL a
//     second in: reads failed against those in flight at the kill.
//
// Every chunk is checked against its address; a wrong one is counted.

var clusterRemotes = []string{"remote-classic", "remote-archive"}

type clusterRig struct {
	r         *Runner
	binary    string
	storeDir  string
	storeURL  string
	chunks    map[string][]addr.Addr
	fileBytes int64
	nodes     []*child
	alone     *child
	hc        *http.Client
}

// clusterPhase is what one phase measured.
type clusterPhase struct {
	name          string
	reads, failed int64
	wrong         int64
	lat           []time.Duration
	hops          float64 // forwarded reads per read (nodes' counters)
	note          string
	elapsed       time.Duration
}

func runCluster(ctx context.Context, r *Runner) error {
	n := 3
	rig := &clusterRig{r: r, hc: &http.Client{Timeout: 60 * time.Second}}
	var err error
	if rig.binary, _, err = serviceBinary(ctx, r); err != nil {
		return err
	}
	if err := rig.prepare(); err != nil {
		return err
	}
	defer rig.close()
	if err := rig.start(ctx, n); err != nil {
		return err
	}
	dur := map[Scale]time.Duration{scaleTiny: time.Second, Small: 3 * time.Second, Large: 10 * time.Second}[r.Config.Scale]
	if dur == 0 {
		dur = 3 * time.Second
	}
	var phases []clusterPhase

	r.Logf("cold storm: 16 clients over %d nodes", n)
	cold := rig.storm("cold, cluster", rig.nodeURLs(), 16)
	clusterStore := rig.sumMetric(rig.nodes, "chunkd_store_bytes_total") + rig.sumMetric(rig.nodes, "chunkd_cluster_stream_bytes_total")
	phases = append(phases, cold)
	r.Logf("cold storm: 16 clients, the service alone")
	coldAlone := rig.storm("cold, service alone", []string{rig.alone.url}, 16)
	aloneStore := rig.sumMetric([]*child{rig.alone}, "chunkd_store_bytes_total")
	phases = append(phases, coldAlone)

	ring := rig.load(ctx, "warm, routing clients", rig.nodeURLs(), 16, false, dur, nil)
	plain := rig.load(ctx, "warm, through one node, not routing", rig.nodeURLs(), 16, true, dur, nil)
	alone := rig.load(ctx, "warm, service alone", []string{rig.alone.url}, 16, false, dur, nil)
	phases = append(phases, ring, plain, alone)

	kill := rig.load(ctx, "kill -9 of one node, routing clients", rig.nodeURLs(), 16, false, dur+2*time.Second, func() time.Time {
		time.Sleep(time.Second)
		at := time.Now()
		rig.nodes[n-1].cmd.Process.Signal(syscall.SIGKILL)
		return at
	})
	phases = append(phases, kill)

	rep := r.Report
	rep.Intro = fmt.Sprintf("%d `chunkd serve` processes on loopback made one cache with `--peers`, beside one service alone, over the Dolt remotes in testdata (%s of table files) in a folder store with a %v round trip. 16 clients per phase.",
		n, humanBytes(rig.fileBytes), r.Config.rtt())
	var b strings.Builder
	b.WriteString("| phase | reads | failed | wrong | p50 | p99 | extra hops per read |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, p := range phases {
		lat := slices.Clone(p.lat)
		slices.Sort(lat)
		rep.Add(Summarize(rep.Suite, "cluster", p.name, 16, []Stats{Sample{Lat: lat, Elapsed: p.elapsed}.Stats()}))
		rep.Samples("cluster", p.name, 16, lat)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %v | %v | %.3f |\n", p.name, p.reads, p.failed, p.wrong, pct(p.lat, 0.5), pct(p.lat, 0.99), p.hops)
		rep.Metric("cluster", p.name, 16, "p50_us", float64(pct(p.lat, 0.5).Microseconds()))
		rep.Metric("cluster", p.name, 16, "p99_us", float64(pct(p.lat, 0.99).Microseconds()))
		rep.Metric("cluster", p.name, 16, "failed", float64(p.failed))
		rep.Metric("cluster", p.name, 16, "wrong", float64(p.wrong))
		rep.Metric("cluster", p.name, 16, "extra_hops_per_read", p.hops)
	}
	fmt.Fprintf(&b, "\nCold storm (every chunk of every remote, batches of 256): the %d nodes read %s from the store, **%.3f×** the files' bytes (`chunkd_store_bytes_total` plus `chunkd_cluster_stream_bytes_total`, summed); the service alone, the same storm: %s, %.3f×.\n",
		n, humanBytes(int64(clusterStore)), clusterStore/float64(rig.fileBytes), humanBytes(int64(aloneStore)), aloneStore/float64(rig.fileBytes))
	fmt.Fprintf(&b, "\nWarm p50 of routing clients against the service alone's in this run: **%.2f×**.\n", float64(pct(ring.lat, 0.5))/float64(max(pct(alone.lat, 0.5), 1)))
	fmt.Fprintf(&b, "\nKill: node %d killed with SIGKILL a second into the phase; %s.\n", n-1, kill.note)
	rep.Metric("cluster", "cold", 16, "store_bytes_per_file_byte", clusterStore/float64(rig.fileBytes))
	rep.Metric("cluster", "cold alone", 16, "store_bytes_per_file_byte", aloneStore/float64(rig.fileBytes))
	rep.Section("Cluster", b.String())
	return nil
}

func humanBytes(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// prepare copies the remotes into a folder store and lists their chunks.
func (rig *clusterRig) prepare() error {
	rig.storeDir = filepath.Join(rig.r.WorkDir, "store")
	rig.chunks = map[string][]addr.Addr{}
	for _, db := range clusterRemotes {
		src := doltfixtures.Path(db)
		ents, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("the Dolt remotes in testdata (run from chunkd's source tree): %w", err)
		}
		os.MkdirAll(filepath.Join(rig.storeDir, db), 0o755)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				return err
			}
			if name, ok := strings.CutSuffix(e.Name(), ".chunks.tsv"); ok {
				_ = name
				sc := bufio.NewScanner(bytes.NewReader(b))
				for sc.Scan() {
					f := strings.Split(sc.Text(), "\t")
					if a, err := addr.Parse(f[0]); err == nil {
						rig.chunks[db] = append(rig.chunks[db], a)
					}
				}
				continue
			}
			if err := os.WriteFile(filepath.Join(rig.storeDir, db, e.Name()), b, 0o644); err != nil {
				return err
			}
			if e.Name() != "manifest" {
				rig.fileBytes += int64(len(b))
			}
		}
	}
	rig.storeURL = fmt.Sprintf("%s?latency=%v", rig.storeDir, rig.r.Config.rtt())
	if bw := rig.r.Config.Bandwidth; bw > 0 {
		rig.storeURL += fmt.Sprintf("&bandwidth=%d", bw)
	}
	env := rig.r.Report.Env
	env.Set("data set", "the Dolt remotes in testdata (%s): %s of table files", strings.Join(clusterRemotes, ", "), humanBytes(rig.fileBytes))
	env.Set("store", "local folder (file://) under %s, read through %s", rig.storeDir, storeEmulation(rig.r.Config.rtt(), rig.r.Config.Bandwidth))
	env.Set("service", "3 chunkd serve processes on 127.0.0.1 with --peers (node-0..2), and one alone; default flags otherwise (--peer-hedge 1s, --mem 256MiB)")
	env.Set("clients", "16 per phase, in this process: HTTP batches of 256 (cold), client.Client single-chunk reads (warm, kill)")
	return nil
}

func (rig *clusterRig) start(ctx context.Context, n int) error {
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	var urls []string
	for _, p := range ports {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	for i, p := range ports {
		args := []string{"serve", "--store", rig.storeURL, "--cache-dir", filepath.Join(rig.r.WorkDir, fmt.Sprintf("node-%d", i)),
			"--listen", fmt.Sprintf("127.0.0.1:%d", p), "--grpc-listen", "", "--node-id", fmt.Sprintf("node-%d", i), "--peers", strings.Join(urls, ",")}
		c, err := startChild(ctx, rig.binary, args, nil, nil)
		if err != nil {
			return err
		}
		rig.nodes = append(rig.nodes, c)
	}
	alone, err := startChild(ctx, rig.binary, []string{"serve", "--store", rig.storeURL, "--cache-dir", filepath.Join(rig.r.WorkDir, "alone"), "--listen", "127.0.0.1:0", "--grpc-listen", ""}, nil, nil)
	if err != nil {
		return err
	}
	rig.alone = alone
	return poll(ctx, 50*time.Millisecond, 30*time.Second, func() (bool, error) {
		for _, nd := range rig.nodes {
			var info api.ClusterInfo
			resp, err := rig.hc.Get(nd.url + api.ClusterPath)
			if err != nil {
				return false, nil
			}
			json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			up := 0
			for _, m := range info.Members {
				if m.State == api.MemberUp {
					up++
				}
			}
			if up != n {
				return false, nil
			}
		}
		return true, nil
	}, func() error { return fmt.Errorf("the %d nodes did not all see each other up", n) })
}

func (rig *clusterRig) nodeURLs() []string {
	var out []string
	for _, c := range rig.nodes {
		out = append(out, c.url)
	}
	return out
}

func (rig *clusterRig) close() {
	for _, c := range append(rig.nodes, rig.alone) {
		if c != nil {
			c.kill()
		}
	}
}

func (rig *clusterRig) sumMetric(cs []*child, name string) float64 {
	var sum float64
	for _, c := range cs {
		s, err := scrapeMetrics(context.Background(), rig.hc, c.url+"/metrics")
		if err == nil {
			sum += s[name]
		}
	}
	return sum
}

// forwards returns each node's forwarded reads so far (nodes that do not
// answer, killed say, are left out).
func (rig *clusterRig) forwards() map[string]float64 {
	out := map[string]float64{}
	for _, c := range rig.nodes {
		s, err := scrapeMetrics(context.Background(), rig.hc, c.url+"/metrics")
		if err != nil {
			continue
		}
		out[c.url] = s[`chunkd_cluster_forwards_total{result="peer"}`] + s[`chunkd_cluster_forwards_total{result="store"}`] + s[`chunkd_cluster_forwards_total{result="hedge_store"}`]
	}
	return out
}

// forwardedSince sums the forwards since before, over the nodes that
// answered both times.
func (rig *clusterRig) forwardedSince(before map[string]float64) float64 {
	var sum float64
	for u, v := range rig.forwards() {
		if b, ok := before[u]; ok {
			sum += v - b
		}
	}
	return sum
}

// storm has clients read every chunk of every remote, entering by the
// URLs in turn, in batches of 256.
func (rig *clusterRig) storm(name string, urls []string, clients int) clusterPhase {
	p := clusterPhase{name: name}
	began := time.Now()
	defer func() { p.elapsed = time.Since(began) }()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var wrong, failed, reads atomic.Int64
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			for _, db := range clusterRemotes {
				as := slices.Clone(rig.chunks[db])
				r.Shuffle(len(as), func(i, j int) { as[i], as[j] = as[j], as[i] })
				for lo := 0; lo < len(as); lo += 256 {
					batch := as[lo:min(lo+256, len(as))]
					start := time.Now()
					w, err := rig.batch(urls[c%len(urls)], db, batch)
					took := time.Since(start)
					wrong.Add(int64(w))
					reads.Add(int64(len(batch)))
					if err != nil {
						failed.Add(int64(len(batch)))
						rig.r.Logf("%s: %v", name, err)
					}
					mu.Lock()
					p.lat = append(p.lat, took)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	p.reads, p.failed, p.wrong = reads.Load(), failed.Load(), wrong.Load()
	p.note = "latency per batch of 256"
	p.elapsed = time.Since(began)
	return p
}

func (rig *clusterRig) batch(base, db string, as []addr.Addr) (int, error) {
	resp, err := rig.hc.Post(base+api.ChunksPath(db), api.ContentTypeBinary, bytes.NewReader(api.EncodeAddresses(as)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%s: %s", resp.Status, msg)
	}
	wrong, got := 0, 0
	for f, err := range api.NewFrameReader(resp.Body).All() {
		if err != nil {
			return wrong, err
		}
		if !f.Found || addr.Of(f.Data) != as[f.Index] {
			wrong++
		}
		got++
	}
	if got != len(as) {
		return wrong, fmt.Errorf("%d of %d answered", got, len(as))
	}
	return wrong, nil
}

// load has clients read random chunks one at a time through Go clients
// for d; during, if set, runs beside them.
func (rig *clusterRig) load(ctx context.Context, name string, urls []string, clients int, noRouting bool, d time.Duration, during func() time.Time) clusterPhase {
	rig.r.Logf("%s: %d clients for %v", name, clients, d)
	p := clusterPhase{name: name}
	type rd struct {
		start, end time.Time
		err        bool
	}
	var mu sync.Mutex
	var all []rd
	var wrong atomic.Int64
	var cls []*client.Client
	for c := range clients {
		entry := urls[c%len(urls)]
		if noRouting {
			entry = urls[0]
		}
		cl, err := client.Open(ctx, client.Options{Service: entry, DB: clusterRemotes[c%len(clusterRemotes)], MemBytes: -1, NoRouting: noRouting,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			p.note = err.Error()
			return p
		}
		cls = append(cls, cl)
		cl.Get(ctx, rig.chunks[cl.DB()][0]) // its answer says "cluster": the client learns the members
	}
	time.Sleep(300 * time.Millisecond)
	before := rig.forwards()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c, cl := range cls {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 9))
			as := rig.chunks[cl.DB()]
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := as[r.IntN(len(as))]
				rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				start := time.Now()
				data, err := cl.Get(rctx, a)
				cancel()
				if err == nil && addr.Of(data) != a {
					wrong.Add(1)
				}
				mu.Lock()
				all = append(all, rd{start, time.Now(), err != nil})
				mu.Unlock()
			}
		})
	}
	eventAt := make(chan time.Time, 1)
	if during != nil {
		go func() { eventAt <- during() }()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	for _, cl := range cls {
		cl.Close()
	}
	// The event (a kill): the reads in flight then began before it and
	// ended after it.
	var killAt time.Time
	if during != nil {
		killAt = <-eventAt
	}
	inFlight := 0
	for _, x := range all {
		p.lat = append(p.lat, x.end.Sub(x.start))
		if x.err {
			p.failed++
		}
		if !killAt.IsZero() && x.start.Before(killAt) && x.end.After(killAt) {
			inFlight++
		}
	}
	p.reads, p.wrong, p.elapsed = int64(len(all)), wrong.Load(), d
	if p.reads > 0 {
		p.hops = rig.forwardedSince(before) / float64(p.reads)
	}
	if during != nil {
		p.note = fmt.Sprintf("%d reads were in flight at the kill, %d failed in the phase", inFlight, p.failed)
	}
	return p
}
