package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
)

// rawServer is a loopback listener that answers each request on a
// connection with what answer returns for it (the request's line and
// headers, and the number of the connection, from 1), written as it is.
// An answer of "" closes the connection instead, one that starts with
// closeAfter closes it after the rest is written, and hang waits for the
// client to hang up.
type rawServer struct {
	t  *testing.T
	l  net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	answer func(conn int, req *http.Request) string
	conns  int
	reqs   []*http.Request
}

const (
	hang       = "\x00hang"
	closeAfter = "\x00close"
)

func (s *rawServer) setAnswer(answer func(conn int, req *http.Request) string) {
	s.mu.Lock()
	s.answer = answer
	s.mu.Unlock()
}

func startRaw(t *testing.T, answer func(conn int, req *http.Request) string) *rawServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{t: t, l: l, answer: answer}
	s.wg.Go(s.serve)
	t.Cleanup(func() {
		l.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) serve() {
	for {
		nc, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		n := s.conns
		s.mu.Unlock()
		s.wg.Go(func() {
			defer nc.Close()
			br := bufio.NewReader(nc)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				s.mu.Lock()
				s.reqs = append(s.reqs, req)
				answer := s.answer
				s.mu.Unlock()
				a := answer(n, req)
				switch a {
				case "":
					return
				case hang:
					io.Copy(io.Discard, br) // until the client hangs up
					return
				}
				a, closing := strings.CutPrefix(a, closeAfter)
				if _, err := io.WriteString(nc, a); err != nil || closing {
					return
				}
			}
		})
	}
}

// counts returns the connections accepted and the requests read.
func (s *rawServer) counts() (conns, reqs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, len(s.reqs)
}

func (s *rawServer) request(i int) *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[i]
}

func (s *rawServer) service(t *testing.T, token string) *httpService {
	t.Helper()
	u, err := url.Parse("http://" + s.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h := newHTTPService(u, "db1", 4, nil, token, nil)
	if h.lean == nil {
		t.Fatal("no lean path for a plain http:// service")
	}
	t.Cleanup(func() { h.close() })
	return h
}

// ok is a 200 answer with body and tier.
func ok(body, tier string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n%s: %s\r\n\r\n%s", len(body), api.HeaderTier, tier, body)
}

func jsonError(code int, msg string) string {
	body := fmt.Sprintf(`{"error":%q}`+"\n", msg)
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(body), body)
}

var testAddr = addr.Of([]byte("a chunk"))

func TestLeanGet(t *testing.T) {
	s := startRaw(t, func(conn int, req *http.Request) string {
		if strings.HasSuffix(req.URL.Path, "/"+testAddr.String()) {
			return ok("page bytes", "memory")
		}
		return jsonError(404, "no such chunk")
	})
	h := s.service(t, "s3cret")
	ctx := context.Background()
	for range 3 {
		r, err := h.get(ctx, testAddr)
		if err != nil || !r.found || string(r.data) != "page bytes" || r.tier != api.TierMemory {
			t.Fatalf("get: %+v, %v", r, err)
		}
	}
	r, err := h.get(ctx, addr.Of([]byte("another")))
	if err != nil || r.found {
		t.Fatalf("get of a missing chunk: %+v, %v", r, err)
	}
	if r, err := h.get(ctx, testAddr); err != nil || !r.found {
		t.Fatalf("get after a 404: %+v, %v", r, err)
	}
	if conns, reqs := s.counts(); conns != 1 || reqs != 5 {
		t.Fatalf("%d connections for %d requests; want 1 for 5", conns, reqs)
	}
	req := s.request(0)
	if req.Method != "GET" || req.URL.Path != api.ChunkPath("db1", testAddr) || req.Host != s.l.Addr().String() ||
		req.Header.Get("Authorization") != "Bearer s3cret" || req.Header.Get("User-Agent") != "chunkd" {
		t.Fatalf("request %s %s, Host %q, headers %v", req.Method, req.URL, req.Host, req.Header)
	}
}

func TestLeanNoToken(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string { return ok("x", "disk") })
	h := s.service(t, "")
	if r, err := h.get(context.Background(), testAddr); err != nil || r.tier != api.TierDisk {
		t.Fatalf("get: %+v, %v", r, err)
	}
	if v, ok := s.request(0).Header["Authorization"]; ok {
		t.Fatalf("Authorization %q sent without a token", v)
	}
}

func TestLeanStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		code          int
		conn, refused bool
	}{
		{http.StatusInternalServerError, false, false},
		{http.StatusBadRequest, false, false},
		{http.StatusServiceUnavailable, true, false},
		{http.StatusBadGateway, true, false}, // the store denies the service: as gRPC's Unavailable
		{http.StatusUnauthorized, true, true},
		{http.StatusForbidden, true, true},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			s := startRaw(t, func(int, *http.Request) string { return jsonError(tc.code, "the reason") })
			h := s.service(t, "")
			for range 2 {
				_, err := h.get(context.Background(), testAddr)
				var se *serviceError
				var ae *api.Error
				if !errors.As(err, &se) || se.conn != tc.conn || se.refused != tc.refused || !errors.As(err, &ae) || ae.Code != tc.code ||
					!strings.Contains(err.Error(), "the reason") {
					t.Fatalf("get: %#v (%v); want conn %v, refused %v, code %d, the body's message", err, err, tc.conn, tc.refused, tc.code)
				}
			}
			if conns, _ := s.counts(); conns != 1 {
				t.Fatalf("%d connections; an error answer read whole keeps its connection", conns)
			}
		})
	}
}

func TestLeanIdleConnectionClosed(t *testing.T) {
	// The service answers one request per connection, then closes it
	// without saying so: the next request on it must go, once, on a
	// fresh connection, and no error come back.
	var once sync.Map
	s := startRaw(t, func(conn int, req *http.Request) string {
		if _, done := once.LoadOrStore(conn, true); done {
			return "" // close, having read the request
		}
		return ok("page", "memory")
	})
	h := s.service(t, "")
	for i := range 4 {
		if r, err := h.get(context.Background(), testAddr); err != nil || string(r.data) != "page" {
			t.Fatalf("get %d: %+v, %v", i, r, err)
		}
	}
	if conns, reqs := s.counts(); conns != 4 || reqs != 7 {
		t.Fatalf("%d connections, %d requests; want 4 and 7 (each reuse failing once)", conns, reqs)
	}
}

func TestLeanClosedForGood(t *testing.T) {
	// A fresh connection that ends with no answer is a connection failure,
	// not retried.
	s := startRaw(t, func(int, *http.Request) string { return "" })
	h := s.service(t, "")
	_, err := h.get(context.Background(), testAddr)
	var se *serviceError
	if !errors.As(err, &se) || !se.conn {
		t.Fatalf("get: %v; want a connection failure", err)
	}
	if conns, reqs := s.counts(); conns != 1 || reqs != 1 {
		t.Fatalf("%d connections, %d requests; want 1 and 1", conns, reqs)
	}
}

func TestLeanConnectionClose(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string {
		return "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\nChunkd-Tier: disk\r\n\r\npage"
	})
	h := s.service(t, "")
	for range 2 {
		if r, err := h.get(context.Background(), testAddr); err != nil || string(r.data) != "page" || r.tier != api.TierDisk {
			t.Fatalf("get: %+v, %v", r, err)
		}
	}
	if conns, reqs := s.counts(); conns != 2 || reqs != 2 {
		t.Fatalf("%d connections, %d requests; want 2 and 2 (a closing connection is not kept)", conns, reqs)
	}
}

func TestLeanFallsBackToNetHTTP(t *testing.T) {
	// Answers the lean path does not read go again through net/http,
	// which reads them right.
	for name, answer := range map[string]string{
		"chunked":       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nChunkd-Tier: memory\r\n\r\n2\r\npa\r\n2\r\nge\r\n0\r\n\r\n",
		"folded header": "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nChunkd-Tier:\r\n memory\r\n\r\npage",
		"continue":      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\nChunkd-Tier: memory\r\n\r\npage",
		"long header":   "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Long: " + strings.Repeat("a", 3*leanBufSize) + "\r\nChunkd-Tier: memory\r\n\r\npage",
		// The body runs to the end of the connection.
		"no length": closeAfter + "HTTP/1.1 200 OK\r\nChunkd-Tier: memory\r\n\r\npage",
		"HTTP/1.0":  closeAfter + "HTTP/1.0 200 OK\r\nContent-Length: 4\r\nChunkd-Tier: memory\r\n\r\npage",
	} {
		t.Run(name, func(t *testing.T) {
			s := startRaw(t, func(int, *http.Request) string { return answer })
			h := s.service(t, "")
			r, err := h.get(context.Background(), testAddr)
			if err != nil || string(r.data) != "page" {
				t.Fatalf("get: %+v (%q), %v", r, r.data, err)
			}
			if _, reqs := s.counts(); reqs != 2 || s.request(0).Header.Get("User-Agent") != "chunkd" || s.request(1).Header.Get("User-Agent") == "chunkd" {
				t.Fatalf("%d requests; want one lean, then one through net/http", reqs)
			}
		})
	}
}

func TestLeanMalformed(t *testing.T) {
	// Garbage: the lean path does not guess, and net/http fails it as a
	// connection failure.
	for name, answer := range map[string]string{
		"not http":    "SSH-2.0-OpenSSH_9.6\r\n\r\n",
		"bad status":  "HTTP/1.1 2x0 OK\r\nContent-Length: 4\r\n\r\npage",
		"bad length":  "HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\npage",
		"no colon":    "HTTP/1.1 200 OK\r\nContent-Length 4\r\n\r\npage",
		"two lengths": "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\nChunkd-Tier: memory\r\n\r\npage",
	} {
		t.Run(name, func(t *testing.T) {
			s := startRaw(t, func(int, *http.Request) string { return answer })
			h := s.service(t, "")
			r, err := h.get(context.Background(), testAddr)
			var se *serviceError
			if !errors.As(err, &se) || !se.conn || r.found {
				t.Fatalf("get: %+v, %v; want a connection failure", r, err)
			}
			if _, reqs := s.counts(); reqs != 2 || s.request(1).Header.Get("User-Agent") == "chunkd" {
				t.Fatalf("%d requests; want one lean, then one through net/http", reqs)
			}
		})
	}
}

func TestLeanOversize(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\npage", api.MaxFrameLen+1)
	})
	h := s.service(t, "")
	_, err := h.get(context.Background(), testAddr)
	var se *serviceError
	if !errors.As(err, &se) || se.conn || !strings.Contains(err.Error(), "above the limit") {
		t.Fatalf("get: %v; want a chunk above the limit", err)
	}
}

func TestLeanShortBody(t *testing.T) {
	s := startRaw(t, func(conn int, req *http.Request) string {
		if conn == 1 {
			// The body is cut short: the answer after it must not be
			// taken for a body.
			return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npage"
		}
		return ok("page", "memory")
	})
	h := s.service(t, "")
	// The first connection writes 4 of 100 bytes and waits for more
	// requests: give up on it after a while.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if r, err := h.get(ctx, testAddr); err == nil {
		t.Fatalf("get of a cut body: %+v", r)
	}
	if r, err := h.get(context.Background(), testAddr); err != nil || string(r.data) != "page" {
		t.Fatalf("get after: %+v, %v", r, err)
	}
	if conns, _ := s.counts(); conns != 2 {
		t.Fatalf("%d connections; a connection cut mid-body is not reused", conns)
	}
}

func TestLeanDeadlineAndCancel(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string { return hang })
	h := s.service(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := h.get(ctx, testAddr)
	var se *serviceError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &se) || !se.conn {
		t.Fatalf("get past its deadline: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := h.get(ctx, testAddr); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled get: %v", err)
	}
	if len(h.lean.idle) != 0 {
		t.Fatalf("%d connections kept after a cancel", len(h.lean.idle))
	}
	// A request that ended in time keeps its connection, with no
	// deadline left on it for the next.
	s.setAnswer(func(int, *http.Request) string { return ok("page", "memory") })
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	if _, err := h.get(ctx, testAddr); err != nil {
		t.Fatal(err)
	}
	cancel()
	if r, err := h.get(context.Background(), testAddr); err != nil || string(r.data) != "page" {
		t.Fatalf("get after a canceled context's request: %+v, %v", r, err)
	}
}

func TestLeanRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("http://" + l.Addr().String())
	l.Close()
	h := newHTTPService(u, "db1", 4, nil, "", nil)
	defer h.close()
	_, err = h.get(context.Background(), testAddr)
	var se *serviceError
	if !errors.As(err, &se) || !se.conn {
		t.Fatalf("get from a closed port: %v; want a connection failure", err)
	}
}

func TestLeanOnlyForPlainHTTP(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://127.0.0.1:7070":           true,
		"http://localhost:7070/prefix/":   true,
		"http://[::1]:7070":               true,
		"https://127.0.0.1:7070":          false,
		"http://127.0.0.1:7070/a%20b":     false,
		"http://127.0.0.1:7070/?x=1":      false,
		"http://[fe80::1%25eth0]:7070":    false,
		"http://user:pw@127.0.0.1:7070/p": false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := newLeanClient(u, "base", "db", "", 4, nil) != nil; got != want {
			t.Errorf("%s: lean %v, want %v", raw, got, want)
		}
	}
	u, _ := url.Parse("http://127.0.0.1:7070")
	if newLeanClient(u, "base", "db", "bad\r\ntoken", 4, nil) != nil {
		t.Error("lean path for a token that is no header value")
	}
	t.Setenv(leanEnv, "0")
	if newLeanClient(u, "base", "db", "", 4, nil) != nil {
		t.Errorf("lean path with %s=0", leanEnv)
	}
}

func TestLeanPrefix(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string { return ok("page", "memory") })
	u, _ := url.Parse("http://" + s.l.Addr().String() + "/cache/")
	h := newHTTPService(u, "db1", 4, nil, "", nil)
	defer h.close()
	if _, err := h.get(context.Background(), testAddr); err != nil {
		t.Fatal(err)
	}
	if got, want := s.request(0).URL.Path, "/cache"+api.ChunkPath("db1", testAddr); got != want {
		t.Fatalf("path %s, want %s", got, want)
	}
}

func TestLeanBody(t *testing.T) {
	// A body larger than the read buffer, in pieces.
	body := bytes.Repeat([]byte("0123456789abcdef"), 5*leanBufSize/16+3)
	s := startRaw(t, func(int, *http.Request) string { return ok(string(body), "memory") })
	h := s.service(t, "")
	for range 2 {
		if r, err := h.get(context.Background(), testAddr); err != nil || !bytes.Equal(r.data, body) {
			t.Fatalf("get: %d bytes, %v", len(r.data), err)
		}
	}
}

// chunkAnswers answers a GET of a chunk with its address as the body (404
// for missing), and a POST of a batch with the frames of the same.
func chunkAnswers(missing addr.Addr) func(int, *http.Request) string {
	return func(_ int, req *http.Request) string {
		if req.Method == http.MethodPost {
			as, err := api.ReadAddresses(req.Body)
			if err != nil {
				return jsonError(400, err.Error())
			}
			var body bytes.Buffer
			fw := api.NewFrameWriter(&body)
			for i, a := range as {
				if a == missing {
					fw.WriteFrame(uint32(i), false, api.TierUnspecified, nil)
				} else {
					fw.WriteFrame(uint32(i), true, api.TierMemory, []byte(a.String()))
				}
			}
			return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", api.ContentTypeBinary, body.Len(), body.String())
		}
		a, err := addr.Parse(req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:])
		if err != nil || a == missing {
			return jsonError(404, "no such chunk")
		}
		return ok(a.String(), "memory")
	}
}

// checkBatch gets as with h.getMany and checks every answer: the
// address as the body, missing not found.
func checkBatch(t *testing.T, h *httpService, as []addr.Addr, missing addr.Addr) {
	t.Helper()
	got := make([]*reply, len(as))
	err := h.getMany(context.Background(), as, func(j int, r reply) { got[j] = &r })
	if err != nil {
		t.Fatalf("getMany of %d: %v", len(as), err)
	}
	for j, a := range as {
		switch r := got[j]; {
		case r == nil:
			t.Fatalf("getMany of %d: no answer for %d", len(as), j)
		case a == missing && r.found, a != missing && (!r.found || string(r.data) != a.String()):
			t.Fatalf("getMany of %d: answer %d is %+v (%q), want %s", len(as), j, r, r.data, a)
		}
	}
}

func TestLeanPipelined(t *testing.T) {
	// A batch of up to leanPipelineMax: GETs written at once on one
	// connection, the answers in order (a missing chunk among them); a
	// larger one is a POST through net/http.
	missing := addr.Of([]byte("missing"))
	s := startRaw(t, chunkAnswers(missing))
	h := s.service(t, "")
	as := make([]addr.Addr, leanPipelineMax+1)
	for i := range as {
		as[i] = addr.Of(fmt.Appendf(nil, "chunk %d", i))
	}
	as[2] = missing
	checkBatch(t, h, as[:5], missing)
	checkBatch(t, h, as[:leanPipelineMax], missing)
	if conns, reqs := s.counts(); conns != 1 || reqs != 5+leanPipelineMax {
		t.Fatalf("%d connections for %d requests; want 1 for %d", conns, reqs, 5+leanPipelineMax)
	}
	for i := range 5 + leanPipelineMax {
		if req := s.request(i); req.Method != http.MethodGet || req.Header.Get("User-Agent") != "chunkd" {
			t.Fatalf("request %d: %s, User-Agent %q; want a lean GET", i, req.Method, req.Header.Get("User-Agent"))
		}
	}
	checkBatch(t, h, as, missing)
	if _, reqs := s.counts(); reqs != 6+leanPipelineMax || s.request(reqs-1).Method != http.MethodPost {
		t.Fatalf("%d requests, the last %s; want a batch of %d as one POST", reqs, s.request(reqs-1).Method, len(as))
	}

	// The service ends the connection after an answer (it is shutting
	// down): the answers read are kept, the rest asked through net/http.
	s.setAnswer(func(conn int, req *http.Request) string {
		a := chunkAnswers(missing)(conn, req)
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, as[1].String()) {
			return strings.Replace(a, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
		}
		return a
	})
	_, before := s.counts()
	checkBatch(t, h, as[:6], missing)
	// The POST may be logged before GETs the service read after the
	// closing answer and left unanswered: look for it among them all.
	_, reqs := s.counts()
	posts := 0
	for i := before; i < reqs; i++ {
		if s.request(i).Method == http.MethodPost {
			posts++
		}
	}
	if posts != 1 {
		t.Fatalf("after a closing answer, %d of %d requests are a POST; want the rest as one POST", posts, reqs-before)
	}
}
