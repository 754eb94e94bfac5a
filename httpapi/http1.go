package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/internal/spin"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"
)

// HTTP1 serves the HTTP API on a listener: plain HTTP/1.1 requests that
// Fast takes (reads of one chunk) it answers on the goroutine of their
// connection; at the first request Fast does not take, it hands the
// connection, with what it has read of it, to Server, which serves the
// rest of its life. TLS connections go to Server as they come (HTTP/2
// included).
//
// Why: for every request on a kept-alive connection, net/http starts a
// goroutine that waits for the next request and, when the handler
// returns, wakes it through a read deadline in the past; each is a
// wake-up of another goroutine, often on another thread. On this
// project's 2-core VM a bare net/http server answered 16 KiB at a p50 of
// 130–180 µs to another process where a loop that reads the request and
// writes the answer on one goroutine took 87–95 µs, and nginx 105–113.
//
// What a fast request sees is what net/http would give it: the answer
// Server.Handler would give (Fast answers as it does: the same tokens,
// routes and metrics), an *http.Request
// with its method, path, headers, Host, RemoteAddr and a context that
// ends when the handler returns. What the fast path does not take is
// handed over untouched: another method, an escaped path, a body, Expect,
// Upgrade, Connection: close, HTTP/1.0, a header folded or not plain, a
// head larger than its buffer. An answer is sent when the handler
// returns, or as it writes when it set Content-Length before its first
// Write. A handler's context ends when it returns, not when its client
// leaves: net/http watches the connection for that with the goroutine
// this path saves.
type HTTP1 struct {
	// Server serves the connections handed over, and its Handler answers
	// the fast requests too. Its IdleTimeout (else ReadTimeout) bounds the
	// wait for a connection's next request, its ReadHeaderTimeout (else
	// ReadTimeout) the read of a request's head, and its ErrorLog gets the
	// panics of handlers.
	Server *http.Server
	// Fast answers a request if it is one for the fast path, as
	// Server.Handler would, and reports whether it did; when it did not,
	// it wrote nothing, and the connection is handed over with the
	// request. It is asked only of GETs without a body that need nothing
	// of the connection. (API.ServeFast is the service's.)
	Fast func(w http.ResponseWriter, r *http.Request) bool
	// Spin is how long a connection that was just answered polls for its
	// next request before its goroutine parks (package internal/spin: on
	// a VM, a parked reader's wake-up costs about as much as the request).
	// 0 never polls (chunkd serve's --spin is 200 µs), unlike
	// client.Options.SpinWait, whose 0 is the default. A connection polls
	// only while no other fast-path request is being answered, stops when
	// a yield of its CPU ran another thread, and pauses polling after
	// polls that found nothing; over 10 ms counts as 10 ms.
	Spin time.Duration

	spin    spin.Policy
	fast    atomic.Int64 // requests Fast answered
	handed  atomic.Int64 // connections handed to Server
	mu      sync.Mutex
	closing bool
	lns     []net.Listener
	conns   map[*http1Conn]struct{}
	handoff *handoffListener
	wg      sync.WaitGroup
}

// http1HeadMax is how large a request head the fast path reads; a larger
// one is handed over (net/http takes heads up to 1 MiB).
const http1HeadMax = 4 << 10

// Serve accepts connections on ln until ln fails or Shutdown or Close
// is called; then it returns http.ErrServerClosed.
func (s *HTTP1) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	if s.handoff == nil {
		s.spin.Max = s.Spin
		if s.Spin <= 0 {
			s.spin.Max = -1
		}
		s.handoff = &handoffListener{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
		s.conns = make(map[*http1Conn]struct{})
		go s.Server.Serve(s.handoff) // ends when Shutdown or Close closes the handoff
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of files, say: wait, as net/http does, then accept again.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("http: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if _, ok := nc.(*tls.Conn); ok {
			s.handed.Add(1)
			s.handoff.give(nc)
			continue
		}
		c := &http1Conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, http1HeadMax), remote: nc.RemoteAddr().String()}
		c.poller = newPoller(nc)
		if !s.track(c) {
			nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// isTemporary reports what net/http's Serve retries after.
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

func (s *HTTP1) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *HTTP1) track(c *http1Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *HTTP1) untrack(c *http1Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

func (s *HTTP1) logf(format string, args ...any) {
	if l := s.Server.ErrorLog; l != nil {
		l.Printf(format, args...)
	}
}

// Shutdown stops accepting, closes the fast path's idle connections and
// those that become idle, waits for their requests in flight, then shuts
// Server down (the connections handed over), all within ctx.
func (s *HTTP1) Shutdown(ctx context.Context) error {
	conns := s.stop()
	for _, c := range conns {
		c.closeIdle()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, c := range conns {
			c.nc.Close()
		}
	}
	return s.Server.Shutdown(ctx)
}

// Close closes the listeners and every connection now, like
// http.Server.Close.
func (s *HTTP1) Close() error {
	for _, c := range s.stop() {
		c.nc.Close()
	}
	return s.Server.Close()
}

// stop marks s closing, closes its listeners and returns its fast
// connections.
func (s *HTTP1) stop() []*http1Conn {
	s.mu.Lock()
	s.closing = true
	lns := s.lns
	s.lns = nil
	conns := make([]*http1Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	return conns
}

// idleTimeout and headTimeout are net/http's choices from Server's
// fields.
func (s *HTTP1) idleTimeout() time.Duration {
	if s.Server.IdleTimeout != 0 {
		return s.Server.IdleTimeout
	}
	return s.Server.ReadTimeout
}

func (s *HTTP1) headTimeout() time.Duration {
	if s.Server.ReadHeaderTimeout != 0 {
		return s.Server.ReadHeaderTimeout
	}
	return s.Server.ReadTimeout
}

// http1Conn is one connection on the fast path.
type http1Conn struct {
	s      *HTTP1
	nc     net.Conn
	poller poller // polls nc for the next request
	br     *bufio.Reader
	remote string
	ctx    context.Context // the connection's: Server and local address, as net/http gives
	head   []byte          // the answer's head, built again for each answer
	iov    [2][]byte       // the head and body of the answer being written
	bufs   net.Buffers     // iov for writev, here so that no answer allocates one
	out    []byte          // whole answers not written yet: the next request was in already (pipelined)
	hdr    http.Header     // the answer's header, cleared for each answer

	mu      sync.Mutex // guards idle and closing against Shutdown
	idle    bool       // waiting for the first byte of a request
	closing bool       // Shutdown: close once idle
}

func (c *http1Conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// closeIdle makes c close once it is idle, now if it is.
func (c *http1Conn) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	if c.idle {
		c.nc.SetReadDeadline(time.Unix(1, 0)) // wakes its wait for a request
	}
}

var errHandOver = errors.New("not for the fast path")

func (c *http1Conn) serve() {
	defer c.s.untrack(c)
	c.ctx = context.WithValue(context.WithValue(context.Background(), http.ServerContextKey, c.s.Server), http.LocalAddrContextKey, c.nc.LocalAddr())
	c.hdr = make(http.Header, 4)
	for first := true; ; first = false {
		if !c.waitRequest(first) {
			c.nc.Close()
			return
		}
		n, req, err := c.readRequest(first)
		if err != nil && !errors.Is(err, errHandOver) { // the client left or was too slow: net/http would close too
			c.nc.Close()
			return
		}
		taken, keep := false, false
		if err == nil {
			taken, keep = c.serveOne(req, n)
		}
		if !taken {
			if c.flush() != nil {
				c.nc.Close()
				return
			}
			c.s.handed.Add(1)
			c.s.handoff.give(&handedConn{Conn: c.nc, r: c.br})
			return
		}
		c.s.fast.Add(1)
		if !keep {
			c.nc.Close()
			return
		}
	}
}

// Metrics are the counters of s's fast path (requests it answered,
// connections it handed to net/http) and of its polling for requests,
// to be registered once.
func (s *HTTP1) Metrics() []prometheus.Collector {
	st := s.spin.Stats()
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkd_http_fast_requests_total", Help: "HTTP/1.1 requests answered on the fast path (no net/http).",
		}, func() float64 { return float64(s.fast.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkd_http_handed_connections_total", Help: "HTTP connections handed to net/http (TLS, or a request the fast path does not take).",
		}, func() float64 { return float64(s.handed.Load()) }),
	}
	for result, v := range map[string]*atomic.Int64{"ready": &st.Ready, "expired": &st.Expired, "busy": &st.Busy, "skipped": &st.Skipped} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chunkd_spin_polls_total", Help: "Waits of HTTP connections for their next request, by what polling did (--spin).",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 { return float64(v.Load()) }))
	}
	return cs
}

// serveOne answers req, whose head is n bytes, if Fast takes it, as work
// in progress for the polling policy (a connection polls for its next
// request only while no other is being answered), and reports whether
// Fast took it and whether the connection goes on. A request Fast does
// not take is left unread.
func (c *http1Conn) serveOne(req *http.Request, n int) (taken, keep bool) {
	c.s.spin.Begin()
	defer c.s.spin.End()
	taken, keep = c.answer(req)
	if !taken {
		return false, false
	}
	c.br.Discard(n)
	if !keep {
		c.flush() //nolint:errcheck // closing anyway: what was answered goes out
		return true, false
	}
	return true, c.br.Buffered() > 0 || c.flush() == nil
}

// http1Coalesce bounds the answers kept to be written together.
const http1Coalesce = 64 << 10

// flush writes the answers kept in c.out.
func (c *http1Conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.nc.Write(c.out)
	c.out = c.out[:0]
	if cap(c.out) > http1Coalesce {
		c.out = nil
	}
	return err
}

// waitRequest waits for the first byte of the next request, up to the
// idle timeout, or for the connection's first request the header timeout
// (as net/http: its whole head must come within it); false when there is
// none to serve (the client closed, the wait timed out, Shutdown).
func (c *http1Conn) waitRequest(first bool) bool {
	if !first && c.br.Buffered() == 0 {
		c.poller.poll(&c.s.spin)
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	c.idle = true
	wait := c.s.idleTimeout()
	if first {
		wait = c.s.headTimeout()
	}
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	c.nc.SetReadDeadline(deadline)
	c.mu.Unlock()
	_, err := c.br.Peek(1)
	c.mu.Lock()
	c.idle = false
	c.mu.Unlock()
	return err == nil
}

// readRequest reads the head of a request that has begun to arrive and
// parses it, consuming nothing: it returns the head's length and the
// request, errHandOver for a request the fast path does not take, or the
// connection's error. The first request's head has had its deadline
// since the connection began (waitRequest).
func (c *http1Conn) readRequest(first bool) (int, *http.Request, error) {
	timed := first
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if n := headEnd(buf); n > 0 {
			if timed {
				c.nc.SetReadDeadline(time.Time{})
			}
			req, err := c.parse(buf[:n])
			return n, req, err
		}
		if len(buf) >= http1HeadMax {
			return 0, nil, errHandOver
		}
		if !timed {
			timed = true
			var deadline time.Time
			if d := c.s.headTimeout(); d > 0 {
				deadline = time.Now().Add(d)
			}
			c.nc.SetReadDeadline(deadline)
		}
		if err := c.flush(); err != nil { // the answers kept go out before a read that may wait
			return 0, nil, err
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return 0, nil, err
		}
	}
}

// headEnd returns the length of the request head at the start of b (up
// to and with its empty line), or 0 while b does not hold all of it. A
// line ended by a bare LF ends the head as net/http reads it; parse then
// hands it over.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// parse reads a request head the fast path takes: "GET /plain/path
// HTTP/1.1" (with a ?query of visible ASCII or not), one plain Host, headers in plain "Name: value" lines, none
// that asks for a body, an expectation, an upgrade or the connection's
// end. Anything else is errHandOver, for net/http to answer as it does.
//
// It allocates little (the fast path's requests are most of a busy
// service's): the head is made a string once and every string of the
// request is a part of it; the header values share one array; the
// request and its URL are one allocation.
func (c *http1Conn) parse(head []byte) (*http.Request, error) {
	line, rest, ok := cutLine(head)
	if !ok {
		return nil, errHandOver
	}
	path, ok := bytes.CutPrefix(line, []byte("GET "))
	if !ok {
		return nil, errHandOver
	}
	target, ok := bytes.CutSuffix(path, []byte(" HTTP/1.1"))
	path, query, hasQuery := bytes.Cut(target, []byte("?"))
	if !ok || len(path) == 0 || path[0] != '/' || !plainPath(path) || (hasQuery && !plainQuery(query)) {
		return nil, errHandOver
	}
	hs := string(head)
	str := func(b []byte) string { // b, a part of head, as a part of hs
		if len(b) == 0 {
			return "" // bytes.Trim's empty answer is nil, no part of head
		}
		i := cap(head) - cap(b)
		return hs[i : i+len(b)]
	}
	lines := bytes.Count(rest, []byte("\n"))
	hdr := make(http.Header, lines)
	vals := make([]string, 0, lines)
	host := ""
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return nil, errHandOver
		}
		if len(line) == 0 {
			break
		}
		nameb, value, ok := bytes.Cut(line, []byte(":"))
		name := str(nameb)
		if !ok || name == "" || !httpguts.ValidHeaderFieldName(name) {
			return nil, errHandOver
		}
		v := str(bytes.Trim(value, " \t"))
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, errHandOver
		}
		key := textproto.CanonicalMIMEHeaderKey(name) // name itself when canonical already
		switch key {
		case "Host":
			if host != "" || v == "" || !httpguts.ValidHostHeader(v) {
				return nil, errHandOver
			}
			host = v
			continue // net/http moves it to Request.Host too
		case "Content-Length":
			if v != "0" || hdr[key] != nil { // net/http folds a repeated length into one
				return nil, errHandOver
			}
		case "Connection":
			if !strings.EqualFold(v, "keep-alive") {
				return nil, errHandOver
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Pragma": // Pragma: net/http may add a Cache-Control
			return nil, errHandOver
		}
		if vs, ok := hdr[key]; ok {
			hdr[key] = append(vs, v)
			continue
		}
		vals = append(vals, v)
		hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)] // capped: an append copies
	}
	if host == "" {
		return nil, errHandOver
	}
	ru := &struct {
		r http.Request
		u url.URL
	}{u: url.URL{Path: str(path), RawQuery: str(query), ForceQuery: hasQuery && len(query) == 0}}
	ru.r = http.Request{Method: http.MethodGet, URL: &ru.u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, Body: http.NoBody, Host: host, RemoteAddr: c.remote, RequestURI: str(target)}
	return &ru.r, nil
}

// cutLine cuts b after its first CRLF; false if b has none or a bare LF
// comes first.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// plainPath reports whether p is letters, digits, -._~ and /: a path that
// means the same escaped or not.
func plainPath(p []byte) bool {
	for _, c := range p {
		if !plainByte[c] {
			return false
		}
	}
	return true
}

// plainQuery reports whether q is a query net/http keeps as it is
// (URL.RawQuery): visible ASCII but '#'.
func plainQuery(q []byte) bool {
	for _, c := range q {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

var plainByte = func() (t [256]bool) {
	for _, r := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/" {
		t[r] = true
	}
	return t
}()

// answer offers req to Fast and, if it takes it, sends its answer; keep
// is false when the connection must close (it failed, the handler
// panicked or wrote other than the length it declared).
func (c *http1Conn) answer(req *http.Request) (taken, keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	clear(c.hdr)
	w := &http1Writer{c: c, hdr: c.hdr, length: -1}
	defer func() {
		if p := recover(); p != nil {
			taken, keep = true, false
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, p, buf)
			}
		}
	}()
	if !c.s.Fast(w, req.WithContext(ctx)) {
		return false, false
	}
	return true, w.finish()
}

// http1Writer is the http.ResponseWriter of a fast request.
type http1Writer struct {
	c       *http1Conn
	hdr     http.Header
	code    int
	sent    bool   // the head is sent
	kept    bool   // the body is kept whole: no length was declared at its first Write
	close   bool   // the answer says Connection: close (Shutdown)
	length  int64  // the Content-Length declared, -1 if none
	written int64  // body bytes sent
	body    []byte // the body kept until the end when no length was declared
	err     error  // the connection's write error
}

func (w *http1Writer) Header() http.Header { return w.hdr }

func (w *http1Writer) WriteHeader(code int) {
	if w.sent || w.code != 0 || code < 200 { // net/http also ignores a second call; 1xx answers are not sent here
		return
	}
	w.code = code
}

func (w *http1Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if !bodyAllowed(w.code) {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.sent {
		if !w.kept {
			w.length = w.declared() // decided at the first Write, as net/http does
			w.kept = w.length < 0
		}
		if w.kept { // kept whole, to send with its length at the end
			w.body = append(w.body, p...)
			return len(p), nil
		}
		if int64(len(p)) > w.length {
			return 0, http.ErrContentLength
		}
		if err := w.send(p); err != nil {
			w.err = err
			return 0, err
		}
		return len(p), nil
	}
	if w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	n, err := w.c.nc.Write(p)
	w.written += int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// declared is the Content-Length the handler set, -1 if none.
func (w *http1Writer) declared() int64 {
	if cl := w.hdr.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// Flush does nothing: an answer with a declared length is already sent
// as written, one without is sent whole at the end.
func (w *http1Writer) Flush() {}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
func (w *http1Writer) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *http1Writer) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// finish sends what the handler left unsent; false when the connection
// cannot carry another request.
func (w *http1Writer) finish() bool {
	if w.err != nil {
		return false
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if !w.sent {
		switch {
		case !bodyAllowed(w.code):
			w.hdr.Del("Content-Length")
			w.body = nil
		case w.kept || w.declared() < 0:
			w.hdr.Set("Content-Length", strconv.Itoa(len(w.body)))
			w.length = int64(len(w.body))
		default: // a length declared, nothing written: sent, then closed as net/http does
			w.length = w.declared()
		}
		if err := w.send(w.body); err != nil {
			return false
		}
	}
	return !w.close && (!bodyAllowed(w.code) || w.written == w.length)
}

// bodyAllowed is net/http's rule: no body for 1xx, 204 and 304.
func bodyAllowed(code int) bool {
	return (code < 100 || code > 199) && code != http.StatusNoContent && code != http.StatusNotModified
}

// send writes the answer's head and the first of its body (all of it,
// or the first Write's) in one writev. The head is built in c.head: the
// status line, the handler's headers, a Date and, as net/http does, a
// Content-Type sniffed from the body when the handler set none.
func (w *http1Writer) send(body []byte) error {
	w.sent = true
	h := w.c.head[:0]
	h = append(h, "HTTP/1.1 "...)
	h = strconv.AppendInt(h, int64(w.code), 10)
	h = append(h, ' ')
	h = append(h, http.StatusText(w.code)...)
	h = append(h, "\r\n"...)
	if _, ok := w.hdr["Content-Type"]; !ok && bodyAllowed(w.code) && len(body) > 0 {
		w.hdr.Set("Content-Type", http.DetectContentType(body))
	}
	if w.c.isClosing() {
		w.close = true
		w.hdr.Set("Connection", "close") // Shutdown: this is the connection's last answer
	}
	if _, ok := w.hdr["Date"]; !ok {
		h = append(h, "Date: "...)
		h = append(h, httpDate()...)
		h = append(h, "\r\n"...)
	}
	for k, vs := range w.hdr {
		if !httpguts.ValidHeaderFieldName(k) {
			continue // net/http drops these too
		}
		for _, v := range vs {
			h = append(h, k...)
			h = append(h, ": "...)
			h = appendHeaderValue(h, v)
			h = append(h, "\r\n"...)
		}
	}
	w.c.head = append(h, "\r\n"...)
	w.written = int64(len(body))
	if w.written == w.length && (w.c.br.Buffered() > 0 || len(w.c.out) > 0) && len(w.c.out)+len(w.c.head)+len(body) <= http1Coalesce {
		// A whole answer, and the next request is in already, or the
		// last answered waits (pipelined GETs): written with the others,
		// in one write, once no request is left waiting.
		w.c.out = append(append(w.c.out, w.c.head...), body...)
		return nil
	}
	if err := w.c.flush(); err != nil {
		return err
	}
	w.c.iov = [2][]byte{w.c.head, body}
	w.c.bufs = w.c.iov[:]
	_, err := w.c.bufs.WriteTo(w.c.nc)
	w.c.iov = [2][]byte{} // the body is the handler's: not kept past the answer
	return err
}

// appendHeaderValue appends v with CR and LF as spaces and trimmed, as
// net/http writes header values.
func appendHeaderValue(h []byte, v string) []byte {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		h = append(h, c)
	}
	return h
}

// date is the Date header's value, made again once a second.
var date atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := date.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.s
}

// handoffListener is the listener Server serves the connections handed
// over on.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to Server, or closes it when Server no longer serves.
func (l *handoffListener) give(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// handedConn is a connection handed over: it reads first what the fast
// path read but did not consume.
type handedConn struct {
	net.Conn
	r *bufio.Reader
}

func (h *handedConn) Read(p []byte) (int, error) { return h.r.Read(p) }

// CloseWrite lets net/http half-close the connection as it does its own.
func (h *handedConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("close write: not supported by %T", h.Conn)
}
