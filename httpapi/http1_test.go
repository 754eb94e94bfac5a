package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/spin"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/prometheus/client_golang/prometheus"
)

// http1Pair serves one handler twice: by a plain net/http server and by
// HTTP1 with fast as its Fast. handed counts the connections HTTP1 handed
// over to its net/http server.
type http1Pair struct {
	plain, fast string // host:port
	h1          *HTTP1
	handed      atomic.Int64
}

func newHTTP1Pair(t *testing.T, h http.Handler, fast func(http.ResponseWriter, *http.Request) bool, opts ...func(*http.Server)) *http1Pair {
	t.Helper()
	p := &http1Pair{}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	lp, lf := listen(), listen()
	plain := &http.Server{Handler: h, ErrorLog: quietLog()}
	for _, o := range opts {
		o(plain)
	}
	go plain.Serve(lp) //nolint:errcheck // ends with Close
	t.Cleanup(func() { plain.Close() })
	// Spin as chunkd serve sets it: every test here also covers a
	// connection that polls for its next request.
	p.h1 = &HTTP1{Fast: fast, Spin: spin.DefaultMax, Server: &http.Server{Handler: h, ErrorLog: quietLog(), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.handed.Add(1)
		}
	}}}
	for _, o := range opts {
		o(p.h1.Server)
	}
	go p.h1.Serve(lf) //nolint:errcheck // ends with Close
	t.Cleanup(func() { p.h1.Close() })
	p.plain, p.fast = lp.Addr().String(), lf.Addr().String()
	return p
}

// answer is what a client reads of one response.
type answer struct {
	status int
	header http.Header
	body   string
	close  bool   // Connection: close
	err    string // of reading the response or its body
}

// exchange writes raw to a new connection to addr at once and reads up to
// n answers (fewer when the connection ends).
func exchange(t *testing.T, addr, raw string, n int) []answer {
	t.Helper()
	c := dialRaw(t, addr, raw)
	defer c.Close()
	method, _, _ := strings.Cut(raw, " ")
	return readAnswers(c, n, method)
}

// dialRaw connects to addr (for 20 seconds at most) and writes raw at
// once.
func dialRaw(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// readAnswers reads up to n answers to requests of method.
func readAnswers(c net.Conn, n int, method string) []answer {
	br := bufio.NewReader(c)
	var out []answer
	for range n {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			if len(out) == 0 {
				out = append(out, answer{err: "no answer"})
			}
			return out
		}
		b, err := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, header: resp.Header, body: string(b), close: resp.Close}
		if err != nil {
			a.err = "body: " + err.Error()
		}
		a.header.Del("Date")
		out = append(out, a)
	}
	return out
}

func (a answer) String() string {
	body := a.body
	if len(body) > 64 {
		body = fmt.Sprintf("%d bytes, %s", len(body), addr.Of([]byte(body)))
	}
	return fmt.Sprintf("%d %v %q close=%v %s", a.status, a.header, body, a.close, a.err)
}

// sameAnswers asks both servers raw and fails unless they answer alike;
// it returns HTTP1's answers.
func (p *http1Pair) sameAnswers(t *testing.T, name, raw string, n int, ignore ...string) []answer {
	t.Helper()
	want, got := exchange(t, p.plain, raw, n), exchange(t, p.fast, raw, n)
	for _, as := range [][]answer{want, got} {
		for _, a := range as {
			for _, h := range ignore {
				a.header.Del(h)
			}
		}
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Errorf("%s:\nnet/http: %v\nHTTP1:    %v", name, want, got)
	}
	return got
}

// TestHTTP1AnswersAsNetHTTP sends the service's API the same requests
// through net/http and through HTTP1 and checks that the answers are the
// same, and that HTTP1 answered the reads of one chunk itself and handed
// every other request over.
func TestHTTP1AnswersAsNetHTTP(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, cache.Config{MemBytes: 64 << 20})
	router := newAPI(f)
	p := newHTTP1Pair(t, router, router.ServeFast)
	a := f.DB.Files[0].Addrs[0]
	chunk := api.ChunkPath("db1", a)
	f.Get(a) // read through, then from memory for both servers
	get := func(path, headers string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n"
	}
	for _, c := range []struct {
		name, raw string
		fast      bool
	}{
		{"a chunk", get(chunk, ""), true},
		{"a chunk, headers folded in case and spaces", "GET " + chunk + " HTTP/1.1\r\nhOsT:x\r\nuser-agent:  t \r\nAccept: */*\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
		{"a chunk not there", get(api.ChunkPath("db1", addr.Of([]byte("not in db1"))), ""), true},
		{"a bad address", get("/v1/dbs/db1/chunks/nothex", ""), true},
		{"a database not there", get(api.ChunkPath("nodb", a), ""), true},
		{"with a query", get(chunk+"?x=1", ""), true},
		{"with a query net/http keeps raw", get(chunk+"?x=%zz&y=[\"a\"]", ""), true},
		{"with a query and a fragment", get(chunk+"?x=1#f", ""), false},
		{"escaped", get(strings.Replace(chunk, "db1", "db%31", 1), ""), false},
		{"Connection: close", get(chunk, "Connection: close\r\n"), false},
		{"HTTP/1.0", "GET " + chunk + " HTTP/1.0\r\n\r\n", false},
		{"no Host", "GET " + chunk + " HTTP/1.1\r\n\r\n", false},
		{"two Hosts", "GET " + chunk + " HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", false},
		{"a bare LF", "GET " + chunk + " HTTP/1.1\nHost: x\n\n", false},
		{"a body", get(chunk, "Content-Length: 2\r\n") + "ab", false},
		{"Expect", get(chunk, "Expect: 100-continue\r\n"), false},
		{"a folded header", get(chunk, "X-A: b\r\n c\r\n"), false},
		{"HEAD", "HEAD " + chunk + " HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"another route", get(api.DBsPath, ""), false},
		{"no route", get("/nope", ""), false},
		{"a batch", fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n%s", api.ChunksPath("db1"), a[:]), false},
		{"a head too large", get(chunk, "X-Big: "+strings.Repeat("b", http1HeadMax)+"\r\n"), false},
		{"not HTTP", "hello\r\n\r\n", false},
	} {
		before := p.handed.Load()
		p.sameAnswers(t, c.name, c.raw, 1, api.HeaderTier) // the tier: a chunk read once more may move between them
		if handed := p.handed.Load() > before; handed == c.fast {
			t.Errorf("%s: handed over %v, want %v", c.name, handed, !c.fast)
		}
	}
	before := f.Requests("http_get_chunk", "200")
	got := exchange(t, p.fast, get(chunk, ""), 1)[0]
	if got.status != 200 || got.body != string(f.DB.Chunks[a]) || got.header.Get(api.HeaderTier) == "" || got.header.Get("Content-Type") != api.ContentTypeBinary {
		t.Errorf("a chunk: %v", got)
	}
	// The fast path's requests count in the route's metrics as any other.
	// The count is made as the handler returns, after the answer went.
	deadline := time.Now().Add(10 * time.Second)
	n := 0.0
	for ; n != 1 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n = f.Requests("http_get_chunk", "200") - before
	}
	if n != 1 {
		t.Errorf("a chunk read on the fast path counted %v times, want once", n)
	}
}

// TestHTTP1Connection: requests sent together on one connection are all
// answered in order across a hand-over, and a head that trickles in is
// read whole.
func TestHTTP1Connection(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, cache.Config{MemBytes: 64 << 20})
	router := newAPI(f)
	p := newHTTP1Pair(t, router, router.ServeFast)
	as := f.DB.Files[0].Addrs
	get := func(a addr.Addr) string { return "GET " + api.ChunkPath("db1", a) + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	for _, a := range as[:4] {
		f.Get(a) // then from memory for both servers: a batch's answer names its tiers
	}
	raw := get(as[0]) + get(as[1]) + fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n%s", api.ChunksPath("db1"), as[2][:]) + get(as[3])
	got := p.sameAnswers(t, "pipelined", raw, 4, api.HeaderTier)
	if len(got) != 4 || got[0].body != string(f.DB.Chunks[as[0]]) || got[1].body != string(f.DB.Chunks[as[1]]) || got[3].body != string(f.DB.Chunks[as[3]]) {
		t.Errorf("pipelined: %v", got)
	}

	// A head a byte at a time, then another request on the same connection.
	c, err := net.Dial("tcp", p.fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	before := p.handed.Load()
	br := bufio.NewReader(c)
	for _, a := range as[4:6] {
		for _, b := range []byte(get(a)) {
			c.Write([]byte{b})
			time.Sleep(time.Millisecond)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !bytes.Equal(body, f.DB.Chunks[a]) {
			t.Errorf("trickled: %d, %d bytes", resp.StatusCode, len(body))
		}
	}
	if p.handed.Load() != before {
		t.Error("a trickled head was handed over")
	}
}

// TestHTTP1Writer: what handlers write reaches the client as net/http
// sends it (bodies with and without a declared length, sniffed types,
// answers without a body, a length declared and not kept to), and a
// handler's panic closes its connection, not the server.
func TestHTTP1Writer(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "01234")
		io.WriteString(w, "56789")
	})
	mux.HandleFunc("GET /parts", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "<html><body>")
		io.WriteString(w, "hi</body></html>")
	})
	mux.HandleFunc("GET /empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /late-length", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "abc")
		w.Header().Set("Content-Length", "6")
		io.WriteString(w, "def")
	})
	mux.HandleFunc("GET /nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "01234")
	})
	mux.HandleFunc("GET /long", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		_, err := io.WriteString(w, "01234")
		io.WriteString(w, "|"+fmt.Sprint(err))
	})
	mux.HandleFunc("GET /header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Host+" "+r.Header.Get("X-In")+" "+r.URL.Path+" "+r.RequestURI+" "+fmt.Sprint(r.ContentLength, r.ProtoMajor, r.ProtoMinor))
		w.Header().Add("X-Two", "a")
		w.Header().Add("X-Two", "b")
	})
	var logged bytes.Buffer
	var mu sync.Mutex
	mux.HandleFunc("GET /panic", func(w http.ResponseWriter, r *http.Request) { panic("on purpose") })
	p := newHTTP1Pair(t, mux, always(mux))
	p.h1.Server.ErrorLog = log.New(writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logged.Write(b) }), "", 0)
	for _, path := range []string{"/declared", "/parts", "/empty", "/late-length", "/nocontent", "/short", "/long", "/header", "/panic", "/nothing"} {
		raw := "GET " + path + " HTTP/1.1\r\nHost: h:1\r\nX-In: in\r\n\r\n"
		p.sameAnswers(t, path, raw+raw, 2)
	}
	if p.handed.Load() != 0 {
		t.Errorf("%d connections handed over, want none", p.handed.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "on purpose") {
		t.Errorf("the panic was not logged: %q", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestHTTP1Shutdown: Shutdown closes idle connections at once, lets a
// request in flight finish and closes its connection after it.
func TestHTTP1Shutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	})
	mux.HandleFunc("GET /quick", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "quick") })
	p := newHTTP1Pair(t, mux, always(mux))
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.fast)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c
	}
	idle, busy := dial(), dial()
	io.WriteString(idle, "GET /quick HTTP/1.1\r\nHost: x\r\n\r\n")
	if a := readAnswers(idle, 1, "GET"); a[0].body != "quick" {
		t.Fatalf("quick: %v", a)
	}
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- p.h1.Shutdown(context.Background()) }()
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if a := readAnswers(busy, 2, "GET"); len(a) != 1 || a[0].body != "done" || !a[0].close {
		t.Errorf("in flight: %v, want its answer with Connection: close, then the end", a)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", p.fast); err == nil {
		c.Close()
		t.Error("still accepting after Shutdown")
	}
}

// TestHTTP1FirstRequestTimeout: a connection that sends nothing is closed
// after the header timeout, as net/http does, not the idle timeout.
func TestHTTP1FirstRequestTimeout(t *testing.T) {
	mux := http.NewServeMux()
	p := newHTTP1Pair(t, mux, always(mux), func(s *http.Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.IdleTimeout = time.Hour
	})
	c, err := net.Dial("tcp", p.fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // the idle timeout is an hour
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a silent connection: %v, want it closed (EOF)", err)
	}
}

// writeCounter is a listener whose connections count their writes.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, writes: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestHTTP1PipelinedTogether: the answers to GETs that arrive together
// (a client's pipelined batch) go out in one write, not one each; an
// answer whose next request is not in yet goes out at once.
func TestHTTP1PipelinedTogether(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 10, Files: 1}, cache.Config{MemBytes: 64 << 20})
	router := newAPI(f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wc := &writeCounter{Listener: ln}
	h1 := &HTTP1{Fast: router.ServeFast, Server: &http.Server{Handler: router, ErrorLog: quietLog()}}
	go h1.Serve(wc) //nolint:errcheck // ends with Close
	t.Cleanup(func() { h1.Close() })
	as := f.DB.Files[0].Addrs[:6]
	raw := ""
	for _, a := range as {
		raw += "GET " + api.ChunkPath("db1", a) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	}
	c := dialRaw(t, ln.Addr().String(), raw)
	defer c.Close()
	br := bufio.NewReader(c)
	for i, a := range as {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !bytes.Equal(body, f.DB.Chunks[a]) {
			t.Fatalf("answer %d: %d, %d bytes", i, resp.StatusCode, len(body))
		}
	}
	// One write (two, should the kernel have split the requests).
	if n := wc.writes.Load(); n > 2 {
		t.Errorf("%d answers to requests sent together took %d writes", len(as), n)
	}
	// One request alone: answered at once, in a write of its own.
	before := wc.writes.Load()
	if _, err := io.WriteString(c, "GET "+api.ChunkPath("db1", as[0])+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a request alone: %v, %v", resp, err)
	}
	if n := wc.writes.Load() - before; n < 1 {
		t.Errorf("a request alone: %d writes", n)
	}
}

// TestHTTP1SpinMetrics: every wait for a connection's next request after
// its first is counted once, by what polling did, in the service's
// registry; every request the fast path answered is counted.
func TestHTTP1SpinMetrics(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	p := newHTTP1Pair(t, h, always(h))
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.h1.Metrics()...)
	conn := dialRaw(t, p.fast, "")
	br := bufio.NewReader(conn)
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := conn.Write([]byte("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	conn.Close()
	var waits, fast float64
	deadline := time.Now().Add(5 * time.Second)
	for (waits < n-1 || fast < n) && time.Now().Before(deadline) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string][]*dto.Metric{}
		for _, mf := range mfs {
			byName[mf.GetName()] = mf.Metric
		}
		spins := byName["chunkd_spin_polls_total"]
		if len(spins) != 4 {
			t.Fatalf("gathered %v; want chunkd_spin_polls_total with 4 results", mfs)
		}
		f := byName["chunkd_http_fast_requests_total"]
		if len(f) != 1 {
			t.Fatalf("gathered %v; want chunkd_http_fast_requests_total", mfs)
		}
		fast = f[0].GetCounter().GetValue() // counted once the answer is out: the last may be on its way
		waits = 0
		for _, m := range spins {
			waits += m.GetCounter().GetValue()
		}
		time.Sleep(time.Millisecond) // the wait after the last answer may still be polling
	}
	if waits < n-1 || waits > n {
		t.Fatalf("%v waits counted after %d requests on one connection; want %d or %d", waits, n, n-1, n)
	}
	if fast != n {
		t.Fatalf("%v requests counted on the fast path after %d; want %d", fast, n, n)
	}
	// One connection is never beside other work: its waits poll (they may
	// also skip after expiries), and the work count returns to zero.
	st := p.h1.spin.Stats()
	if st.Ready.Load()+st.Expired.Load()+st.Busy.Load() == 0 {
		t.Fatal("no wait polled")
	}
	for end := time.Now().Add(5 * time.Second); p.h1.spin.Work() != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the last wait may be polling still
	}
	if w := p.h1.spin.Work(); w != 0 {
		t.Fatalf("work in progress %d after the connection closed; want 0", w)
	}
}

// TestChunkRouteAgreesWithMux: the hand-written route of a chunk read
// (chunkRoute) takes a request only where the mux would route it to
// api.PatternChunk, with the same path values; everything else goes to the
// mux, whose answer is then the mux's.
func TestChunkRouteAgreesWithMux(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 1}, cache.Config{})
	a := newAPI(f)
	// A mux with the chunk's pattern alone, to read its path values.
	var gotDB, gotAddr string
	values := http.NewServeMux()
	values.HandleFunc(api.PatternChunk, func(w http.ResponseWriter, r *http.Request) {
		gotDB, gotAddr = r.PathValue("db"), r.PathValue("address")
	})
	paths := []string{
		"/v1/dbs/db1/chunks/abc", "/v1/dbs/a.b-c_d~e/chunks/0123456789abcdefghijklmnopqrstuv", "/v1/dbs/db/chunks/...",
		"/v1/dbs/./chunks/x", "/v1/dbs/../chunks/x", "/v1/dbs//chunks/x", "/v1/dbs/db/chunks/", "/v1/dbs/db/chunks/a/",
		"/v1/dbs/db/chunks/a/b", "/v1/dbs/db/chunks/.", "/v1/dbs/db/chunks/..", "/v1/dbs/db/chunk/a", "/v1/dbs/db",
		"/v1/dbs/db/chunks", "/v1/dbs/%64b/chunks/a", "/v1/dbs/d%2Fb/chunks/a", "/v1/dbs/db/chunks/a%2Fb", "/v1/dbs/db/./chunks/a",
		"/v1/dbs/db//chunks/a", "/v1//dbs/db/chunks/a", "/v1/dbs/db/chunks/a?x=1", "/v1/dbs/db/root", "/v2/dbs/db/chunks/a", "/",
	}
	hand := 0
	for _, p := range paths {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			r := httptest.NewRequest(method, p, nil)
			_, want := a.mux.Handler(r)
			db, address, ok := chunkRoute(r)
			if !ok {
				continue
			}
			hand++
			gotDB, gotAddr = "", ""
			values.ServeHTTP(httptest.NewRecorder(), r)
			if want != api.PatternChunk || db != gotDB || address != gotAddr {
				t.Errorf("%s %s: by hand %q %q, the mux %q with %q %q", method, p, db, address, want, gotDB, gotAddr)
			}
		}
	}
	if hand != 4 {
		t.Errorf("%d requests routed by hand, want the 4 plain GETs (one with a query, which routes as its path)", hand)
	}
	// A route of another package under /v1/dbs/: every match is the mux's.
	const special = "GET /v1/dbs/{db}/chunks/special"
	other := newAPI(f, Route{Pattern: special, Handler: http.NotFoundHandler(), Need: auth.DBToken})
	if _, pattern := other.mux.Handler(httptest.NewRequest("GET", "/v1/dbs/db/chunks/special", nil)); other.chunk != nil || pattern != special {
		t.Errorf("with a route beside the chunk's: %q, hand routing on: %v", pattern, other.chunk != nil)
	}
	// The Dolt remote's downloads, a pattern with no method (as chunkd serve
	// registers it): chunk reads stay routed by hand.
	if dolt := newAPI(f, Route{Pattern: api.PatternDoltFiles, Handler: http.NotFoundHandler(), Need: auth.Open}); dolt.chunk == nil {
		t.Error("beside the Dolt remote's route, chunk reads are routed by the mux")
	}
	// A route for a host outranks any path's: the mux's too.
	const host = "chunks.example.com/"
	hosted := newAPI(f, Route{Pattern: host, Handler: http.NotFoundHandler(), Need: auth.Open})
	if _, pattern := hosted.mux.Handler(httptest.NewRequest("GET", "http://chunks.example.com/v1/dbs/db/chunks/abc", nil)); hosted.chunk != nil || pattern != host {
		t.Errorf("with a route for a host: %q, hand routing on: %v", pattern, hosted.chunk != nil)
	}
}

// TestRouteNeedsARule: a route without an access rule is refused when the
// API is made, so none can be served open by mistake.
func TestRouteNeedsARule(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 1}, cache.Config{})
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "no access rule") {
			t.Errorf("a route without a rule: %v, want a panic naming it", p)
		}
	}()
	newAPI(f, Route{Pattern: "GET /v1/x", Handler: http.NotFoundHandler()})
}

// BenchmarkChunkRoute: naming a chunk read's route by hand and by the mux
// (the fast path routes each request once, by hand).
func BenchmarkChunkRoute(b *testing.B) {
	f := newFixture(b, testdb.Options{Chunks: 1}, cache.Config{})
	a := newAPI(f)
	r := httptest.NewRequest("GET", api.ChunkPath("db1", f.DB.All()[0]), nil)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := chunkRoute(r); !ok {
				b.Fatal("not routed")
			}
		}
	})
	b.Run("mux", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, p := a.mux.Handler(r); p != api.PatternChunk {
				b.Fatal(p)
			}
		}
	})
}

// FuzzHTTP1Parse: a request head the fast path takes (parse) is read by
// net/http as the same request: method, path, Host and headers. The head
// is parsed from a larger buffer, as the connection's reader holds it.
func FuzzHTTP1Parse(f *testing.F) {
	for _, s := range []string{
		"GET /v1/dbs/db/chunks/abc HTTP/1.1\r\nHost: h\r\nUser-Agent: Go-http-client/1.1\r\n\r\n",
		"GET /a HTTP/1.1\r\nhost: h:1\r\nx-a: 1\r\nX-A:  2 \r\nauthorization: Bearer t\r\nConnection: Keep-Alive\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\naccept-ENCODING:\tgzip\r\n\r\n",
		"GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n", "GET /a? HTTP/1.1\r\nHost: h\r\n\r\n", "GET /a?x=%20&y=[1,\"b\"]&z=%ZZ HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /a?b#c HTTP/1.1\r\nHost: h\r\n\r\n", "GET /a HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", "GET /a HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: h\r\nX: a b\r\nY:\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	c := &http1Conn{remote: "127.0.0.1:1"}
	f.Fuzz(func(t *testing.T, head []byte) {
		n := headEnd(head)
		if n == 0 {
			return
		}
		buf := append(append([]byte(nil), head...), "GET /next HTTP/1.1\r\n"...) // more after the head
		got, err := c.parse(buf[:n])
		if err != nil {
			return // handed over: net/http answers it
		}
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head[:n])))
		if err != nil {
			t.Fatalf("parse took %q, net/http refuses it: %v", head[:n], err)
		}
		if got.Method != want.Method || got.URL.Path != want.URL.Path || got.URL.RawPath != want.URL.RawPath ||
			got.URL.RawQuery != want.URL.RawQuery || got.URL.ForceQuery != want.URL.ForceQuery || got.URL.String() != want.URL.String() ||
			got.RequestURI != want.RequestURI || got.Host != want.Host {
			t.Fatalf("%q: parsed %s %q %q host %q, net/http %s %q %q host %q", head[:n],
				got.Method, got.URL.Path, got.RequestURI, got.Host, want.Method, want.URL.Path, want.RequestURI, want.Host)
		}
		want.Header.Del("Host") // net/http moves it to Host, and keeps it in Header on HTTP/1.1 only sometimes
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%q: headers %q, net/http %q", head[:n], got.Header, want.Header)
		}
		copy(buf, bytes.Repeat([]byte("x"), len(buf))) // the reader's buffer is reused: the request keeps its own bytes
		if got.URL.Path != want.URL.Path || !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%q: the request changed with the buffer it was read from", head[:n])
		}
	})
}
