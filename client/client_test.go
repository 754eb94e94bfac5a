package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/grpcapi"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/internal/testnet"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"google.golang.org/grpc"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Shared with the other packages' tests.
var (
	newStore = testdb.NewStore
	makeDB   = testdb.MustMake
)

// open opens a client for the test, closed when it ends. Unless the test
// sets ServiceTimeout, the client does not hedge: the counts the tests
// check must not depend on whether this machine answers within
// DefaultServiceTimeout (on 2 busy cores it often does not); the hedging
// tests set their own timeout.
func open(t testing.TB, o Options) *Client {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet()
	}
	if o.ServiceTimeout == 0 {
		o.ServiceTimeout = -1
	}
	if o.LocalDir == "" {
		o.LocalDir = NoLocalDir // the services of these tests run here: read them as from another host
	}
	c, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newCache starts an in-process cache service over s.
func newCache(t testing.TB, s store.Store, miss cache.MissPolicy) *cache.Cache {
	t.Helper()
	c, err := cache.New(cache.Config{Store: s, CacheDir: t.TempDir(), NoFsync: true, Miss: miss, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// apiHandler is the HTTP API of c.
func apiHandler(c *cache.Cache) http.Handler { return httpapi.New(httpapi.Config{Cache: c}) }

// grpcServer is a gRPC server of c's chunk service, with opts.
func grpcServer(c *cache.Cache, opts ...grpc.ServerOption) *grpc.Server {
	return grpcapi.New(grpcapi.Config{Options: opts}, grpcapi.ChunkCache(c, 0))
}

// serveHTTP serves h on a loopback port and returns its URL.
func serveHTTP(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func startHTTP(t testing.TB, s store.Store, miss cache.MissPolicy) *httptest.Server {
	return serveHTTP(t, apiHandler(newCache(t, s, miss)))
}

// serveGRPC serves gs on a loopback port and returns its grpc:// URL.
func serveGRPC(t testing.TB, gs *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)
	return "grpc://" + lis.Addr().String()
}

// getAll reads every address with Get and checks the bytes.
func getAll(t testing.TB, c *Client, db *testdb.DB, as []addr.Addr) {
	t.Helper()
	for _, a := range as {
		data, err := c.Get(context.Background(), a)
		if err != nil {
			t.Fatalf("Get(%s): %v", a, err)
		}
		if !bytes.Equal(data, db.Chunks[a]) {
			t.Fatalf("Get(%s): wrong bytes", a)
		}
	}
}

// getMany reads addresses with GetMany and checks every position came once, right.
// get reads a and checks its bytes.
func get(t testing.TB, c *Client, db *testdb.DB, a addr.Addr) {
	t.Helper()
	data, err := c.Get(context.Background(), a)
	if err != nil {
		t.Fatalf("Get(%s): %v", a, err)
	}
	if !bytes.Equal(data, db.Chunks[a]) {
		t.Fatalf("Get(%s): wrong bytes", a)
	}
}

func getMany(t testing.TB, c *Client, db *testdb.DB, as []addr.Addr) {
	t.Helper()
	seen := make([]bool, len(as))
	err := c.GetMany(context.Background(), as, func(i int, data []byte) error {
		if seen[i] {
			t.Errorf("position %d delivered twice", i)
		}
		seen[i] = true
		if !bytes.Equal(data, db.Chunks[as[i]]) {
			t.Errorf("position %d (%s): wrong bytes", i, as[i])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("position %d not delivered", i)
		}
	}
}

func TestStoreOnly(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 3, Chunks: 40})
	all := db.All()
	c := open(t, Options{Store: s, DB: "db1"})
	if root, err := c.Root(context.Background()); err != nil || root != db.Root {
		t.Fatalf("Root = %s, %v; want %s", root, err, db.Root)
	}
	getAll(t, c, db, all)
	st := c.Stats()
	if st.Store.Chunks != int64(len(all)) || st.Store.Requests != int64(len(all)) || st.Memory.Chunks != 0 || st.Service.Chunks != 0 {
		t.Fatalf("first pass: %+v", st)
	}
	if st.ManifestLoads != 1 || st.TablesOpened != 3 || st.MetaReads != 3 {
		t.Fatalf("open: %d manifest loads, %d tables, %d index reads; want 1, 3, 3 (64 KiB tail)", st.ManifestLoads, st.TablesOpened, st.MetaReads)
	}
	getAll(t, c, db, all)
	d := c.Stats().Sub(st)
	if d.Memory.Chunks != int64(len(all)) || d.Store.Chunks != 0 || d.Store.Requests != 0 {
		t.Fatalf("second pass should be memory hits: %+v", d)
	}

	// A batch on a client without memory: one merged read per file.
	c2 := open(t, Options{Store: s, DB: "db1", MemBytes: -1})
	getMany(t, c2, db, all)
	st2 := c2.Stats()
	if st2.Store.Chunks != int64(len(all)) || st2.Store.Requests != 3 || st2.Memory.Requests != 0 {
		t.Fatalf("batch: %d chunks in %d reads; want %d in 3 (one per file): %v", st2.Store.Chunks, st2.Store.Requests, len(all), st2)
	}
	if st2.Batches != 1 || st2.Gets != 0 {
		t.Fatalf("calls: %+v", st2)
	}
}

func TestStoreRootDatabase(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "", testdb.Options{Chunks: 20})
	c := open(t, Options{Store: s})
	getAll(t, c, db, db.All())
	if _, err := Open(context.Background(), Options{Store: s, Service: "http://127.0.0.1:9460"}); err == nil {
		t.Fatal("root database with a service: no error")
	}
}

func TestHTTPService(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	srv := startHTTP(t, s, cache.ReadThrough)
	testService(t, s, db, srv.URL)
}

func TestGRPCService(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	url := serveGRPC(t, grpcServer(newCache(t, s, cache.ReadThrough)))
	testService(t, s, db, url)
}

func testService(t *testing.T, s store.Store, db *testdb.DB, url string) {
	all := db.All()
	// No hedging: on a loaded machine (the race detector, other tests) a
	// first request may take longer than the default hedge delay, and
	// this test counts where chunks come from.
	c := open(t, Options{Store: s, DB: "db1", Service: url, ServiceTimeout: -1})
	getAll(t, c, db, all)
	st := c.Stats()
	tiers := st.ServiceTiers
	if st.Service.Chunks != int64(len(all)) || st.Store.Chunks != 0 || st.Service.Requests != int64(len(all)) {
		t.Fatalf("first pass via the service: %v", st)
	}
	if sum := tiers.Memory + tiers.Disk + tiers.Partial + tiers.Store; sum != int64(len(all)) || tiers.Store == 0 {
		t.Fatalf("service tiers %+v: want %d in all, some read through from the store", tiers, len(all))
	}
	if st.ServiceErrors+st.ServiceBad+st.ServiceNotFound+st.Hedged != 0 {
		t.Fatalf("unexpected trouble: %v", st)
	}
	// Second pass: the client's memory.
	getAll(t, c, db, all)
	if d := c.Stats().Sub(st); d.Memory.Chunks != int64(len(all)) || d.Service.Requests != 0 {
		t.Fatalf("second pass: %v", d)
	}
	// A fresh client without memory, in one batch: the service's memory.
	c2 := open(t, Options{Store: s, DB: "db1", Service: url, MemBytes: -1})
	dup := append(append([]addr.Addr{}, all...), all[:5]...)
	getMany(t, c2, db, dup)
	st2 := c2.Stats()
	if st2.Service.Chunks != int64(len(all)) || st2.ServiceTiers.Memory != int64(len(all)) || st2.Service.Requests != 1 || st2.Store.Chunks != 0 {
		t.Fatalf("batch via the service: %v", st2)
	}
	if !strings.Contains(st2.String(), "service 60 chunks") {
		t.Fatalf("String: %s", st2)
	}
}

func TestServiceMissNotFound(t *testing.T) {
	// A service run with --miss=notfound answers "not found" for chunks it
	// has not downloaded yet: the client reads those from the store.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 20})
	srv := startHTTP(t, s, cache.NotFound)
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL, MemBytes: -1})
	all := db.All()
	getAll(t, c, db, all[:5])
	getMany(t, c, db, all)
	st := c.Stats()
	if st.ServiceNotFound == 0 || st.Store.Chunks == 0 || st.Service.Chunks+st.Store.Chunks != int64(len(all)+5) {
		t.Fatalf("stats: %v", st)
	}
	if st.ServiceErrors != 0 || st.ServiceBackoffs != 0 {
		t.Fatalf("not-found answers are no service failures: %v", st)
	}

	gsURL := serveGRPC(t, grpcServer(newCache(t, s, cache.NotFound)))
	cg := open(t, Options{Store: s, DB: "db1", Service: gsURL, MemBytes: -1})
	getAll(t, cg, db, all[:3])
	getMany(t, cg, db, all)
	if st := cg.Stats(); st.ServiceNotFound == 0 || st.Store.Chunks == 0 {
		t.Fatalf("grpc stats: %v", st)
	}
}

func TestServiceUnknownDatabase(t *testing.T) {
	// The service's store does not hold the database (another bucket):
	// it answers 404 / NOT_FOUND for it, and the client uses its store.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 20})
	other := newStore(t)
	makeDB(t, other, "db2", testdb.Options{Chunks: 1}) // a store that exists (one that does not is unreachable)
	srv := startHTTP(t, other, cache.ReadThrough)
	gsURL := serveGRPC(t, grpcServer(newCache(t, other, cache.ReadThrough)))
	for _, url := range []string{srv.URL, gsURL} {
		// No hedging: this counts the service's answers, which a loaded
		// machine can make slower than the hedge delay.
		c := open(t, Options{Store: s, DB: "db1", Service: url, MemBytes: -1, ServiceTimeout: -1})
		getAll(t, c, db, db.All()[:3])
		getMany(t, c, db, db.All())
		if st := c.Stats(); st.Store.Chunks != 23 || st.ServiceNotFound != 23 || st.ServiceErrors != 0 {
			t.Fatalf("%s: %v", url, st)
		}
	}
}

func TestServiceStopped(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 20})
	all := db.All()
	half := len(all) / 2

	t.Run("http", func(t *testing.T) {
		srv := startHTTP(t, s, cache.ReadThrough)
		c := openSteady(t, Options{Store: s, DB: "db1", Service: srv.URL})
		getAll(t, c, db, all[:half])
		srv.Close()
		checkStopped(t, c, db, all, half)
	})
	t.Run("grpc", func(t *testing.T) {
		gs := grpcServer(newCache(t, s, cache.ReadThrough))
		url := serveGRPC(t, gs)
		c := openSteady(t, Options{Store: s, DB: "db1", Service: url})
		getAll(t, c, db, all[:half])
		gs.Stop()
		checkStopped(t, c, db, all, half)
	})
	t.Run("never-up", func(t *testing.T) {
		for _, scheme := range []string{"http", "grpc"} {
			c := openSteady(t, Options{Store: s, DB: "db1", Service: scheme + "://" + testnet.Refused(t)})
			checkStopped(t, c, db, all, 0)
		}
	})
}

// openSteady opens a client (one that does not hedge, as open does) whose
// first backoff lasts a minute: the reads that follow a failure are all
// skipped, however slowly this machine runs them.
func openSteady(t *testing.T, o Options) *Client {
	t.Helper()
	c := open(t, o)
	c.backoff.min = time.Minute
	return c
}

// expire ends b's backoff now, as if its delay had passed.
func expire(b *backoff) { b.until.Store(time.Now().UnixNano()) }

func checkStopped(t *testing.T, c *Client, db *testdb.DB, all []addr.Addr, half int) {
	t.Helper()
	before := c.Stats()
	if before.Service.Chunks != int64(half) {
		t.Fatalf("before the stop: %v", before)
	}
	getAll(t, c, db, all[half:half+4])
	getMany(t, c, db, all[half+4:])
	d := c.Stats().Sub(before)
	rest := int64(len(all) - half)
	if d.Store.Chunks != rest || d.Service.Chunks != 0 {
		t.Fatalf("after the stop: %v", d)
	}
	if d.ServiceErrors < 1 || d.ServiceBackoffs != 1 || d.ServiceSkipped < 3 {
		t.Fatalf("after the stop: %d errors, %d backoffs, %d skipped; want >= 1, 1, >= 3", d.ServiceErrors, d.ServiceBackoffs, d.ServiceSkipped)
	}
}

func TestBackoff(t *testing.T) {
	// Delays of minutes, ended by expire: the checks made during a backoff
	// hold however slowly this test runs.
	b := backoff{min: time.Minute, max: 3 * time.Minute}
	if !b.allow() {
		t.Fatal("fresh backoff refuses")
	}
	if d, started := b.fail(); !started || d != time.Minute {
		t.Fatalf("first failure: %v %v", d, started)
	}
	if _, started := b.fail(); started {
		t.Fatal("a failure during the backoff started another")
	}
	if b.allow() {
		t.Fatal("allowed during the backoff")
	}
	expire(&b)
	if !b.allow() {
		t.Fatal("not allowed after the backoff")
	}
	if d, _ := b.fail(); d != 2*time.Minute {
		t.Fatalf("second delay %v", d)
	}
	expire(&b)
	if d, _ := b.fail(); d != 3*time.Minute {
		t.Fatalf("third delay %v, want the cap", d)
	}
	b.succeed()
	if !b.allow() {
		t.Fatal("not allowed after a success")
	}
	if d, _ := b.fail(); d != time.Minute {
		t.Fatalf("delay after a success %v", d)
	}

	// In real time: a backoff ends by itself once its delay has passed,
	// and not before.
	r := backoff{min: 20 * time.Millisecond, max: time.Second}
	start := time.Now()
	r.fail()
	for !r.allow() {
		if time.Since(start) > time.Minute {
			t.Fatal("a 20ms backoff still refuses after a minute")
		}
		time.Sleep(time.Millisecond)
	}
	if took := time.Since(start); took < r.min {
		t.Fatalf("allowed after %v, within the %v backoff", took, r.min)
	}
}

func TestServiceRecovers(t *testing.T) {
	// After the backoff the client tries the service again and, when it
	// answers, uses it again.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 20})
	all := db.All()
	var down sync.Mutex
	isDown := true
	h := apiHandler(newCache(t, s, cache.ReadThrough))
	srv := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Lock()
		d := isDown
		down.Unlock()
		if d {
			api.WriteError(w, http.StatusServiceUnavailable, "shutting down")
			return
		}
		h.ServeHTTP(w, r)
	}))
	c := openSteady(t, Options{Store: s, DB: "db1", Service: srv.URL, MemBytes: -1})
	getAll(t, c, db, all[:5])
	if st := c.Stats(); st.ServiceBackoffs != 1 || st.Store.Chunks != 5 || st.ServiceSkipped != 4 {
		t.Fatalf("while down: %v", st)
	}
	down.Lock()
	isDown = false
	down.Unlock()
	if c.backoff.allow() {
		t.Fatal("the service was allowed again within the backoff")
	}
	expire(&c.backoff) // the minute has passed (TestBackoff waits out a real one)
	before := c.Stats()
	getAll(t, c, db, all[5:])
	if d := c.Stats().Sub(before); d.Service.Chunks != int64(len(all)-5) || d.Store.Chunks != 0 {
		t.Fatalf("after recovery: %v", d)
	}
}

func TestSlowServiceHedges(t *testing.T) {
	// The service never answers: it waits for the client to hang up. Every
	// read must then come from the store, after the hedge delay.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 20})
	all := db.All()
	srv := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: net/http notices a client hanging up (and
		// cancels r.Context) only once the handler has read the body.
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL, ServiceTimeout: 20 * time.Millisecond})
	// A client that waited for the service would wait forever: give up
	// after a minute (the hedge takes 20 ms).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if data, err := c.Get(ctx, all[0]); err != nil || !bytes.Equal(data, db.Chunks[all[0]]) {
		t.Fatalf("Get(%s): %v", all[0], err)
	}
	n := 0
	err := c.GetMany(ctx, all[1:], func(i int, data []byte) error {
		if !bytes.Equal(data, db.Chunks[all[1+i]]) {
			t.Errorf("position %d: wrong bytes", i)
		}
		n++
		return nil
	})
	if err != nil || n != len(all)-1 {
		t.Fatalf("GetMany: %d of %d, %v", n, len(all)-1, err)
	}
	st := c.Stats()
	if st.Hedged != int64(len(all)) || st.Store.Chunks != int64(len(all)) || st.Service.Chunks != 0 {
		t.Fatalf("stats: %v", st)
	}
	if st.ServiceErrors != 0 || st.ServiceBackoffs != 0 {
		t.Fatalf("a canceled hedge is no service failure: %v", st)
	}
}

func TestHedgeServiceWins(t *testing.T) {
	// The store is slower than the service: after the hedge, the service's
	// answer still wins. The order does not depend on the machine's speed:
	// the store never answers (it waits for the read to be canceled), and
	// the service answers each request only once the client has hedged it.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 10})
	h := apiHandler(newCache(t, s, cache.ReadThrough))
	var client atomic.Pointer[Client]
	var requests atomic.Int64
	srv := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		for client.Load().Stats().Hedged < n {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		h.ServeHTTP(w, r)
	}))
	hs := &hangingStore{Store: s}
	hs.hang.Store(true)
	c := open(t, Options{Store: hs, DB: "db1", Service: srv.URL, ServiceTimeout: 20 * time.Millisecond})
	client.Store(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, a := range db.All()[:3] {
		if data, err := c.Get(ctx, a); err != nil || !bytes.Equal(data, db.Chunks[a]) {
			t.Fatalf("Get(%s): %v", a, err)
		}
	}
	if st := c.Stats(); st.Hedged != 3 || st.Service.Chunks != 3 || st.Store.Chunks != 0 || st.ServiceErrors != 0 {
		t.Fatalf("stats: %v", st)
	}
}

// lyingHTTP answers every chunk request with wrong bytes.
func lyingHTTP() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(api.PatternChunk, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderTier, "memory")
		w.Write([]byte("not the chunk you asked for"))
	})
	mux.HandleFunc(api.PatternChunks, func(w http.ResponseWriter, r *http.Request) {
		as, err := api.ReadAddresses(r.Body)
		if err != nil {
			api.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		fw := api.NewFrameWriter(w)
		for i := range as {
			fw.WriteFrame(uint32(i), true, api.TierDisk, []byte("lies, all lies"))
		}
	})
	return mux
}

// lyingGRPC answers every chunk request with wrong bytes.
type lyingGRPC struct {
	chunkpb.UnimplementedChunkCacheServer
}

func (lyingGRPC) GetChunk(_ context.Context, req *chunkpb.GetChunkRequest) (*chunkpb.GetChunkResponse, error) {
	return &chunkpb.GetChunkResponse{Found: true, Contents: []byte("wrong"), Tier: chunkpb.Tier_TIER_MEMORY}, nil
}

func (lyingGRPC) GetChunks(req *chunkpb.GetChunksRequest, stream grpc.ServerStreamingServer[chunkpb.ChunkReply]) error {
	for i, a := range req.Addresses {
		if err := stream.Send(&chunkpb.ChunkReply{Index: uint32(i), Address: a, Found: true, Contents: []byte("wrong"), Tier: chunkpb.Tier_TIER_DISK}); err != nil {
			return err
		}
	}
	return nil
}

func TestLyingService(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 15})
	all := db.All()
	gs := grpc.NewServer()
	chunkpb.RegisterChunkCacheServer(gs, lyingGRPC{})
	for _, url := range []string{serveHTTP(t, lyingHTTP()).URL, serveGRPC(t, gs)} {
		c := open(t, Options{Store: s, DB: "db1", Service: url, MemBytes: -1})
		getAll(t, c, db, all[:2])
		getMany(t, c, db, all)
		st := c.Stats()
		n := int64(len(all) + 2)
		if st.ServiceBad != n || st.Store.Chunks != n || st.Service.Chunks != 0 {
			t.Fatalf("%s: %v", url, st)
		}
	}
}

// batchService answers batch reads (a POST of n addresses) with frame i
// holding frame(i, n, a); a nil frame cuts the answer there (after its 200).
func batchService(t *testing.T, frame func(i, n int, a addr.Addr) []byte) *httptest.Server {
	return serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as, err := api.ReadAddresses(r.Body)
		if err != nil {
			api.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		fw := api.NewFrameWriter(w)
		for i, a := range as {
			data := frame(i, len(as), a)
			if data == nil {
				fw.Flush()
				panic(http.ErrAbortHandler)
			}
			fw.WriteFrame(uint32(i), true, api.TierDisk, data)
		}
		fw.Flush()
	}))
}

func TestServiceCutsBatchShort(t *testing.T) {
	// A service that fails in the middle of a batch stream (after its 200):
	// the chunks it sent count, the rest come from the store.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 10})
	all := db.All()
	srv := batchService(t, func(i, n int, a addr.Addr) []byte {
		if i >= n/2 {
			return nil
		}
		return db.Chunks[a]
	})
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL})
	getMany(t, c, db, all)
	st := c.Stats()
	if half := int64(len(all) / 2); st.Service.Chunks != half || st.Store.Chunks != half || st.ServiceErrors != 1 || st.ServiceBackoffs != 0 {
		t.Fatalf("stats: %v", st)
	}
}

// TestServiceLiesInBatch: a service that sends the right bytes for some
// chunks of a batch and wrong ones for others, in one buffered answer
// (the client checks buffered answers together): each wrong one is
// caught and read from the store, each right one is taken.
func TestServiceLiesInBatch(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 40})
	all := db.All()
	srv := batchService(t, func(i, _ int, a addr.Addr) []byte {
		if i%3 == 1 {
			return append([]byte("x"), db.Chunks[a]...)
		}
		return db.Chunks[a]
	})
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL, MemBytes: -1})
	getMany(t, c, db, all)
	st := c.Stats()
	bad := int64(len(all)+1) / 3
	if st.ServiceBad != bad || st.Store.Chunks != bad || st.Service.Chunks != int64(len(all))-bad {
		t.Fatalf("%d chunks, every third wrong: %v", len(all), st)
	}
}

// rewrite applies change to the stored bytes of the table file key.
func rewrite(t testing.TB, s store.Store, key string, change func([]byte)) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	change(b)
	if err := s.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
}

// entryOf finds a chunk's entry in a stored table file.
func entryOf(t testing.TB, s store.Store, key string, a addr.Addr) tablefile.Entry {
	t.Helper()
	b, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := testdb.OpenTable(t, b).Lookup(a)
	if !ok {
		t.Fatalf("%s not in %s", a, key)
	}
	return e
}

func TestCorruptRecordInStore(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 15})
	file := db.Files[1]
	bad := file.Addrs[4]
	e := entryOf(t, s, file.Key, bad)
	rewrite(t, s, file.Key, func(b []byte) { b[e.Offset+e.Offset%7+1] ^= 0x40 }) // inside the record: CRC fails

	srv := startHTTP(t, s, cache.ReadThrough)
	for _, svc := range []string{"", srv.URL} {
		c := open(t, Options{Store: s, DB: "db1", Service: svc})
		data, err := c.Get(context.Background(), bad)
		if err == nil || data != nil {
			t.Fatalf("service %q: corrupt chunk read without error", svc)
		}
		checkCorrupt(t, err, bad, file.Key)
		if !errors.Is(err, tablefile.ErrCorrupt) {
			t.Fatalf("not a CRC error: %v", err)
		}
		// The batch delivers the good chunks and names the bad one.
		as := []addr.Addr{db.Files[0].Addrs[0], bad, file.Addrs[5]}
		var got []int
		err = c.GetMany(context.Background(), as, func(i int, data []byte) error {
			got = append(got, i)
			return nil
		})
		checkCorrupt(t, err, bad, file.Key)
		if len(got) != 2 || got[0] != 0 || got[1] != 2 {
			t.Fatalf("delivered %v", got)
		}
		if st := c.Stats(); st.StoreBad != 2 {
			t.Fatalf("service %q: %v", svc, st)
		}
		if svc != "" && c.Stats().ServiceErrors == 0 {
			t.Fatalf("the service's failure on the corrupt record was not counted: %v", c.Stats())
		}
	}
}

func checkCorrupt(t *testing.T, err error, a addr.Addr, key string) {
	t.Helper()
	var ce *ChunkError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Addr != a || ce.Tier != TierStore || ce.From != key {
		t.Fatalf("error %v: want a store ChunkError for %s in %s wrapping ErrCorrupt", err, a, key)
	}
	if !strings.Contains(err.Error(), a.String()) {
		t.Fatalf("error %q does not name %s", err, a)
	}
}

// putTable writes a table file of chunks, the first under a wrong address,
// and returns its key and the wrong address.
func putBadTable(t testing.TB, s store.Store, dbName string, good [][]byte, liar []byte) (string, addr.Addr, []addr.Addr) {
	t.Helper()
	ctx := context.Background()
	mdb, err := manifest.Open(ctx, s, dbName)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	wrong := addr.Of([]byte("something else entirely"))
	if err := w.AddWithAddr(wrong, liar); err != nil {
		t.Fatal(err)
	}
	var addrs []addr.Addr
	for _, g := range good {
		a, err := w.Add(g)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	name, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := mdb.TableKey(name)
	if err := s.Put(ctx, key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Version: manifest.Version5, NBF: manifest.FormatDolt, Root: addrs[0],
		Specs: []manifest.Spec{{Name: name, Chunks: uint32(len(good) + 1)}}}
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.Update(ctx, "", m); err != nil {
		t.Fatal(err)
	}
	return key, wrong, addrs
}

func TestWrongHashInStore(t *testing.T) {
	s := newStore(t)
	good := [][]byte{[]byte("chunk one"), []byte("chunk two")}
	key, wrong, addrs := putBadTable(t, s, "bad", good, []byte("I am not what my address says"))
	c := open(t, Options{Store: s, DB: "bad"})
	for range 2 { // the bad chunk is never cached
		data, err := c.Get(context.Background(), wrong)
		if data != nil {
			t.Fatal("got data")
		}
		checkCorrupt(t, err, wrong, key)
		if !strings.Contains(err.Error(), "hash") {
			t.Fatalf("error %q does not say the hash is wrong", err)
		}
	}
	err := c.GetMany(context.Background(), []addr.Addr{addrs[0], wrong, addrs[1]}, func(i int, data []byte) error {
		if !bytes.Equal(data, good[i/2]) {
			t.Errorf("position %d: wrong bytes", i)
		}
		return nil
	})
	checkCorrupt(t, err, wrong, key)
	if st := c.Stats(); st.StoreBad != 3 || st.Memory.Chunks != 0 {
		t.Fatalf("stats: %v", st)
	}
}

func TestCorruptCopyFallsBackToAnotherFile(t *testing.T) {
	// With an appendix every chunk is in two files. A bad record in the
	// appendix (read first) is read from the other file instead.
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 20, Appendix: true})
	app := db.Files[0]
	a := app.Addrs[3]
	e := entryOf(t, s, app.Key, a)
	rewrite(t, s, app.Key, func(b []byte) { b[e.Offset+2] ^= 1 })
	c := open(t, Options{Store: s, DB: "db1", MemBytes: -1})
	getAll(t, c, db, []addr.Addr{a})
	getMany(t, c, db, app.Addrs)
	if st := c.Stats(); st.StoreBad != 2 {
		t.Fatalf("stats: %v", st)
	}
}

func TestGetManyDuplicatesAndMissing(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 3, Chunks: 10})
	f := db.Files
	miss1, miss2 := addr.Of([]byte("missing 1")), addr.Of([]byte("missing 2"))
	as := []addr.Addr{f[0].Addrs[1], f[1].Addrs[2], miss1, f[2].Addrs[3], f[0].Addrs[1], miss2, f[1].Addrs[2], miss1}
	srv := startHTTP(t, s, cache.ReadThrough)
	for _, svc := range []string{"", srv.URL} {
		c := open(t, Options{Store: s, DB: "db1", Service: svc})
		for pass := 0; pass < 2; pass++ { // the second pass from memory
			var got []int
			err := c.GetMany(context.Background(), as, func(i int, data []byte) error {
				got = append(got, i)
				if !bytes.Equal(data, db.Chunks[as[i]]) {
					t.Errorf("position %d: wrong bytes", i)
				}
				return nil
			})
			var me *MissingError
			if !errors.Is(err, ErrNotFound) || !errors.As(err, &me) || len(me.Addrs) != 2 || me.Addrs[0] != miss1 || me.Addrs[1] != miss2 {
				t.Fatalf("service %q: error %v; want both missing addresses", svc, err)
			}
			if !strings.Contains(err.Error(), miss1.String()) || !strings.Contains(err.Error(), "db1") {
				t.Fatalf("error %q does not name the first missing address", err)
			}
			if want := []int{0, 1, 3, 4, 6}; !equalInts(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
		}
		st := c.Stats()
		if st.NotFound != 4 || st.Memory.Chunks != 3 {
			t.Fatalf("service %q: %v", svc, st)
		}
		if svc != "" && (st.ServiceNotFound != 4 || st.Service.Chunks != 3) {
			t.Fatalf("service: %v", st)
		}
		// fn's error stops the batch.
		stop := errors.New("stop")
		calls := 0
		err := c.GetMany(context.Background(), as[:2], func(int, []byte) error { calls++; return stop })
		if err != stop || calls != 1 {
			t.Fatalf("fn error: %v after %d calls", err, calls)
		}
		// Empty batch.
		if err := c.GetMany(context.Background(), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGetNotFound(t *testing.T) {
	s := newStore(t)
	makeDB(t, s, "db1", testdb.Options{Chunks: 5})
	srv := startHTTP(t, s, cache.ReadThrough)
	missing := addr.Of([]byte("nope"))
	for _, svc := range []string{"", srv.URL} {
		c := open(t, Options{Store: s, DB: "db1", Service: svc})
		_, err := c.Get(context.Background(), missing)
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), missing.String()) {
			t.Fatalf("service %q: %v", svc, err)
		}
		if st := c.Stats(); st.NotFound != 1 || (svc != "" && st.ServiceNotFound != 1) {
			t.Fatalf("service %q: %v", svc, st)
		}
	}
}

func TestLargeBatchIsSplit(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: api.MaxBatch + 100, ChunkSize: 64})
	srv := startHTTP(t, s, cache.ReadThrough)
	gsURL := serveGRPC(t, grpcServer(newCache(t, s, cache.ReadThrough)))
	for _, url := range []string{srv.URL, gsURL} {
		c := open(t, Options{Store: s, DB: "db1", Service: url, MemBytes: -1, ServiceTimeout: -1})
		getMany(t, c, db, db.All())
		if st := c.Stats(); st.Service.Requests != 2 || st.Service.Chunks != int64(api.MaxBatch+100) {
			t.Fatalf("%s: %v", url, st)
		}
	}
}

func TestRefresh(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 10})
	c := open(t, Options{Store: s, DB: "db1"})
	getAll(t, c, db, db.All())

	// Another writer adds a table file.
	mdb, _ := manifest.Open(ctx, s, "db1")
	m, version, err := mdb.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	newChunk := []byte("a chunk of the next version")
	a, _ := w.Add(newChunk)
	name, _ := w.Finish()
	key, _ := mdb.TableKey(name)
	if err := s.Put(ctx, key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	m.Specs = append(m.Specs, manifest.Spec{Name: name, Chunks: 1})
	m.Root = a
	m.Relock()
	if _, err := mdb.Update(ctx, version, m); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Get(ctx, a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before Refresh: %v", err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if data, err := c.Get(ctx, a); err != nil || !bytes.Equal(data, newChunk) {
		t.Fatalf("after Refresh: %v", err)
	}
	if root, _ := c.Root(ctx); root != a {
		t.Fatalf("root %s", root)
	}
	if st := c.Stats(); st.ManifestLoads != 2 || st.TablesOpened != 2 {
		t.Fatalf("Refresh reopened known files: %v", st)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := Open(ctx, Options{DB: "x"}); err == nil {
		t.Error("no store: no error")
	}
	if _, err := Open(ctx, Options{Store: s, DB: "nope", Logger: quiet()}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing database: %v", err)
	}
	if _, err := Open(ctx, Options{Store: s, DB: "../x"}); err == nil {
		t.Error("bad name: no error")
	}
	for _, svc := range []string{"127.0.0.1:9460", "ftp://host:1", "http://"} {
		if _, err := Open(ctx, Options{Store: s, DB: "x", Service: svc}); err == nil {
			t.Errorf("service %q: no error", svc)
		}
	}
	// With a service the load runs in the background; a missing database
	// shows on the first read that needs the store.
	db := "nope"
	c := open(t, Options{Store: s, DB: db, Service: "http://" + testnet.Refused(t)})
	if _, err := c.Get(ctx, addr.Of([]byte("x"))); !errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotFound) {
		t.Errorf("missing database behind a service: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 5})
	c := open(t, Options{Store: s, DB: "db1"})
	c.Close()
	if _, err := c.Get(context.Background(), db.Root); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := c.GetMany(context.Background(), db.All(), func(int, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetMany after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCanceled(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Chunks: 5})
	hs := &hangingStore{Store: s}
	c := open(t, Options{Store: hs, DB: "db1", MemBytes: -1})
	hs.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, db.Root); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.GetMany(ctx, db.All(), func(int, []byte) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetMany: %v", err)
	}
}

// hangingStore's ReadAt waits for its context to end, once hang is set.
type hangingStore struct {
	store.Store
	hang atomic.Bool
}

func (h *hangingStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return h.Store.ReadAt(ctx, key, p, off)
}

func TestConcurrentReaders(t *testing.T) {
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 3, Chunks: 30})
	srv := startHTTP(t, s, cache.ReadThrough)
	c := open(t, Options{Store: s, DB: "db1", Service: srv.URL, MemBytes: 64 << 10})
	all := db.All()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range all {
				a := all[(i*7+g)%len(all)]
				if g%2 == 0 {
					data, err := c.Get(context.Background(), a)
					if err != nil || !bytes.Equal(data, db.Chunks[a]) {
						t.Errorf("Get(%s): %v", a, err)
						return
					}
				} else if i%10 == 0 {
					getMany(t, c, db, all[i:min(i+10, len(all))])
				}
			}
		}()
	}
	wg.Wait()
}

// fixtureDir holds real Dolt remotes (see its README).
var fixtureDir = doltfixtures.Root()

// copyRemote copies a Dolt remote's files into s under prefix.
func copyRemote(t testing.TB, s store.Store, dir, prefix string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".tsv") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(context.Background(), prefix+e.Name(), b); err != nil {
			t.Fatal(err)
		}
	}
}

// fixtureChunks reads the *.chunks.tsv lists of dir: address to
// uncompressed length.
func fixtureChunks(t testing.TB, dir string) map[addr.Addr]int { return doltfixtures.DirChunks(t, dir) }

func TestDoltRemotes(t *testing.T) {
	s := newStore(t)
	for _, kind := range []string{"classic", "archive"} {
		t.Run(kind, func(t *testing.T) {
			dir := filepath.Join(fixtureDir, "remote-"+kind)
			chunks := fixtureChunks(t, dir)
			copyRemote(t, s, dir, kind+"/")
			c := open(t, Options{Store: s, DB: kind, MemBytes: -1})
			if root, _ := c.Root(context.Background()); root.String() != "eu1nmp52v8djust3rnsjkr132rdmj335" {
				t.Fatalf("root %s", root)
			}
			var as []addr.Addr
			for a := range chunks {
				as = append(as, a)
			}
			for _, a := range as[:50] {
				data, err := c.Get(context.Background(), a)
				if err != nil || len(data) != chunks[a] {
					t.Fatalf("Get(%s): %d bytes, %v; want %d", a, len(data), err, chunks[a])
				}
			}
			n := 0
			err := c.GetMany(context.Background(), as, func(i int, data []byte) error {
				if len(data) != chunks[as[i]] || addr.Of(data) != as[i] {
					t.Errorf("%s: wrong chunk", as[i])
				}
				n++
				return nil
			})
			if err != nil || n != len(as) {
				t.Fatalf("GetMany: %d of %d, %v", n, len(as), err)
			}
			st := c.Stats()
			if st.Store.Chunks != int64(len(as)+50) || st.StoreBad != 0 {
				t.Fatalf("stats: %v", st)
			}
			t.Logf("%s: %d chunks; %v", kind, len(as), st)
		})
	}
	// The archive database through the cache service too.
	if _, err := s.Head(context.Background(), "archive/manifest"); err != nil {
		return
	}
	srv := startHTTP(t, s, cache.ReadThrough)
	chunks := fixtureChunks(t, filepath.Join(fixtureDir, "remote-archive"))
	var as []addr.Addr
	for a := range chunks {
		as = append(as, a)
	}
	c := open(t, Options{Store: s, DB: "archive", Service: srv.URL, ServiceTimeout: -1})
	if err := c.GetMany(context.Background(), as, func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Service.Chunks != int64(len(as)) {
		t.Fatalf("via the service: %v", st)
	}
}

func BenchmarkGetMemoryHit(b *testing.B) {
	s := newStore(b)
	db := makeDB(b, s, "db1", testdb.Options{Chunks: 1000})
	c := open(b, Options{Store: s, DB: "db1"})
	all := db.All()
	getMany(b, c, db, all)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if _, err := c.Get(ctx, all[i%len(all)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkGetManyStore reads 32 chunks of two files from a store with a
// 30 ms round trip, one Get at a time and as one batch.
func BenchmarkGetManyStore(b *testing.B) {
	s := newStore(b)
	db := makeDB(b, s, "db1", testdb.Options{Files: 2, Chunks: 200})
	slow := store.WithLatency(s, 30*time.Millisecond, 0)
	c := open(b, Options{Store: slow, DB: "db1", MemBytes: -1})
	var as []addr.Addr
	for _, f := range db.Files {
		for i := 0; i < 16; i++ {
			as = append(as, f.Addrs[i*11])
		}
	}
	ctx := context.Background()
	run := func(b *testing.B, read func() error) {
		before := c.Stats()
		n := 0
		for b.Loop() {
			if err := read(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		d := c.Stats().Sub(before)
		b.ReportMetric(float64(d.Store.Requests)/float64(n), "reads/op")
	}
	b.Run("get-each", func(b *testing.B) {
		run(b, func() error {
			for _, a := range as {
				if _, err := c.Get(ctx, a); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("batch", func(b *testing.B) {
		run(b, func() error { return c.GetMany(ctx, as, func(int, []byte) error { return nil }) })
	})
}

// serviceWithCopy starts a cache service over a two-file database and has
// it download the first file, as a service on this host would.
func serviceWithCopy(t *testing.T) (s store.Store, db *testdb.DB, dir, url string) {
	t.Helper()
	s = newStore(t)
	db = makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	dir = t.TempDir()
	cc, err := cache.New(cache.Config{Store: s, CacheDir: dir, NoFsync: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	srv := serveHTTP(t, apiHandler(cc))
	first := db.Files[0]
	if _, err := cc.GetChunk(context.Background(), "db1", first.Addrs[0]); err != nil {
		t.Fatal(err)
	}
	isFirst := func(ti api.TableInfo) bool { return ti.Name == first.Name }
	if err := cc.WaitCached(context.Background(), "db1", time.Minute, isFirst); err != nil {
		t.Fatal(err)
	}
	return s, db, dir, srv.URL
}

// waitLoaded waits until c's store tier has loaded the manifest and the
// indexes (with the local copies): until then reads go to the service.
func waitLoaded(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.st.current(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLocalDirFound: a client of a service on this host finds its cache
// directory by itself (the service says where it is, and the token in its
// host file proves the client sees it); a directory given that is not
// the service's (another service's, one that is not there, one given
// without a service) is an error that says why; NoLocalDir reads
// through the API only.
func TestLocalDirFound(t *testing.T) {
	s, db, dir, url := serviceWithCopy(t)
	ctx := context.Background()
	c, err := Open(ctx, Options{Store: s, DB: "db1", Service: url, MemBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if abs, _ := filepath.Abs(dir); c.LocalDir() != abs {
		t.Fatalf("found %q, want the service's %q", c.LocalDir(), abs)
	}
	waitLoaded(t, c)
	getAll(t, c, db, db.Files[0].Addrs[:3])
	if st := c.Stats(); st.LocalChunks != 3 || st.Service.Chunks != 0 {
		t.Fatalf("read from the service's files: %v, want 3 local chunks", st)
	}
	_, _, otherDir, _ := serviceWithCopy(t)
	for name, o := range map[string]Options{
		"another service's": {Store: s, DB: "db1", Service: url, LocalDir: otherDir},
		"not there":         {Store: s, DB: "db1", Service: url, LocalDir: filepath.Join(dir, "nope")},
		"not a service's":   {Store: s, DB: "db1", Service: url, LocalDir: t.TempDir()},
		"without a service": {Store: s, DB: "db1", LocalDir: dir},
	} {
		o.Logger = quiet()
		if c, err := Open(ctx, o); err == nil {
			c.Close()
			t.Errorf("%s directory: opened, want an error", name)
		} else {
			t.Logf("%s directory: %v", name, err)
		}
	}
	none, err := Open(ctx, Options{Store: s, DB: "db1", Service: url, LocalDir: NoLocalDir, MemBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	getAll(t, none, db, db.Files[0].Addrs[:3])
	if st := none.Stats(); none.LocalDir() != "" || st.LocalChunks != 0 || st.Service.Chunks != 3 {
		t.Fatalf("NoLocalDir: dir %q, %v; want every chunk from the service", none.LocalDir(), st)
	}
}

// TestLocalDir reads the files a service on this host has verified
// directly, and the files it has not through the service.
func TestLocalDir(t *testing.T) {
	s, db, dir, url := serviceWithCopy(t)
	first := db.Files[0]
	c := open(t, Options{Store: s, DB: "db1", Service: url, LocalDir: dir})
	waitLoaded(t, c)
	getMany(t, c, db, first.Addrs)
	st := c.Stats()
	if st.LocalReads == 0 || st.LocalChunks != int64(len(first.Addrs)) || st.Service.Chunks != 0 || st.Store.Chunks != int64(len(first.Addrs)) {
		t.Fatalf("cached file: %+v", st)
	}
	getMany(t, c, db, db.Files[1].Addrs)
	if st2 := c.Stats().Sub(st); st2.Service.Chunks != int64(len(db.Files[1].Addrs)) || st2.LocalReads != 0 || st2.LocalChunks != 0 {
		t.Fatalf("file not cached: %+v", st2)
	}
	// One chunk at a time, with no memory tier: each a read of the file.
	c = open(t, Options{Store: s, DB: "db1", Service: url, LocalDir: dir, MemBytes: -1})
	waitLoaded(t, c)
	for _, a := range first.Addrs {
		get(t, c, db, a)
	}
	if st := c.Stats(); st.LocalReads != int64(len(first.Addrs)) || st.LocalChunks != int64(len(first.Addrs)) || st.Service.Chunks != 0 || st.Store.Requests != 0 {
		t.Fatalf("single gets: %+v", st)
	}
}

// TestLocalDirLoadsLazilyOnce: a same-host client reads nothing from the
// store at Open; its first chunk read starts the load of the manifest and
// the local files' indexes, once: a store that fails is not asked again
// on every read (the service answers them).
func TestLocalDirLoadsLazilyOnce(t *testing.T) {
	_, db, dir, url := serviceWithCopy(t)
	down := store.NewCounting(downStore{})
	c := open(t, Options{Store: down, DB: "db1", Service: url, LocalDir: dir, MemBytes: -1})
	if n := down.Requests(); n != 0 {
		t.Fatalf("Open made %d store requests, want none", n)
	}
	for _, a := range db.Files[1].Addrs {
		get(t, c, db, a)
		time.Sleep(time.Millisecond) // a failed load has ended before the next read
	}
	if n := down.Requests(); n != 2 {
		t.Fatalf("%d store requests over %d reads, want the one load's (the manifest and its sidecar)", n, len(db.Files[1].Addrs))
	}
}

// downStore is a store that answers every request with an error.
type downStore struct{ store.Store }

func (downStore) Get(context.Context, string) ([]byte, error) { return nil, errors.New("store down") }
func (downStore) Head(context.Context, string) (store.Info, error) {
	return store.Info{}, errors.New("store down")
}
func (downStore) ReadAt(context.Context, string, []byte, int64) (int, error) {
	return 0, errors.New("store down")
}
func (downStore) Open(context.Context, string) (io.ReadCloser, store.Info, error) {
	return nil, store.Info{}, errors.New("store down")
}
func (downStore) String() string { return "down" }

// TestLocalDirChecks: a local copy is opened with the sums the service
// wrote when it verified the file; its records are CRC-checked against
// them (a record that fails is read from the store), and a copy that is
// not the verified file is not used at all. Without the layout marker,
// every chunk of a local copy is hashed as well.
func TestLocalDirChecks(t *testing.T) {
	s, db, dir, url := serviceWithCopy(t)
	first := db.Files[0]
	path := filepath.Join(dir, api.CacheTablesDir, filepath.FromSlash(first.Key))
	good, tf := testdb.ReadTable(t, path)
	// Flip a byte of chunk 1's record in the verified copy.
	bad := bytes.Clone(good)
	e, _ := tf.Lookup(first.Addrs[1])
	bad[e.Offset+2] ^= 0xff
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	c := open(t, Options{Store: s, DB: "db1", Service: url, LocalDir: dir, MemBytes: -1})
	waitLoaded(t, c)
	get(t, c, db, first.Addrs[1])
	get(t, c, db, first.Addrs[3])
	if st := c.Stats(); st.Store.Requests != 1 || st.StoreBad != 1 || st.LocalChunks != 1 {
		t.Fatalf("bad CRC in the local copy: %+v", st)
	}

	// Rewrite the file with the same addresses, so the same name, chunk 2
	// holding other bytes under a valid CRC, in the store and in the local
	// copy: its index is not the verified one, so the copy is not used.
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	for i, a := range first.Addrs {
		data := db.Chunks[a]
		if i == 2 {
			data = []byte("not the chunk at this address")
		}
		if err := w.AddWithAddr(a, data); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := w.Finish(); err != nil || name != first.Name {
		t.Fatalf("rewritten file is %s (%v), want %s", name, err, first.Name)
	}
	forged := buf.Bytes()
	if err := s.Put(context.Background(), first.Key, forged); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	c = open(t, Options{Store: s, DB: "db1", Service: url, LocalDir: dir, MemBytes: -1})
	waitLoaded(t, c)
	get(t, c, db, first.Addrs[0]) // from the service, which holds it in memory
	if st := c.Stats(); st.LocalReads != 0 {
		t.Fatalf("a copy that is not the verified file was read: %+v", st)
	}

	// Without the marker, every chunk is hashed as well.
	if err := os.Remove(filepath.Join(dir, api.CacheLayoutFile)); err != nil {
		t.Fatal(err)
	}
	c = open(t, Options{Store: s, DB: "db1", Service: url, LocalDir: dir, MemBytes: -1})
	waitLoaded(t, c)
	if _, err := c.Get(context.Background(), first.Addrs[2]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("mislabelled chunk, unhashed layout: %v", err)
	}
	for _, a := range first.Addrs[:2] {
		get(t, c, db, a)
	}
	if st := c.Stats(); st.StoreBad < 1 || st.LocalReads == 0 {
		t.Fatalf("unhashed layout: %+v", st)
	}
}
