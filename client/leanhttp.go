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
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/spin"
)

// The lean path: a single-chunk GET over plain HTTP, written and read by
// the calling goroutine on a kept-alive TCP connection of its own pool.
//
// A page read from SQLite runs on a locked OS thread (a cgo callback).
// net/http's client hands every request to the connection's write and
// read goroutines and back through channels, and each of those hand-offs
// to or from a locked thread is a thread wake-up. On BenchmarkPageRead a
// page read through the service cost 1.73× a bare HTTP round trip, and
// 1.05× with the lean path, which keeps the exchange on the caller (see
// docs/benchmarks.md).
//
// It reads only the answers chunkd serve gives (HTTP/1.1, a
// Content-Length body); anything else (chunked, no length, a 1xx, a
// folded header) is asked again through net/http, never guessed at.
// TLS and gRPC keep their usual paths. Its connections are read and
// written with blocking calls on the caller's thread (blocking_unix.go).
// For A/B measurements, CHUNKD_LEAN_HTTP=0 in the environment turns the
// lean path off, and CHUNKD_LEAN_HTTP=poll keeps it on Go's network
// poller.
const leanEnv = "CHUNKD_LEAN_HTTP"

// leanIdleTimeout is how long an idle connection is kept, as for
// net/http's pool (the service closes its own after 5 minutes).
const leanIdleTimeout = 90 * time.Second

// leanBlockingMax bounds a client's connections on blocking calls: the
// threads its requests in flight can hold (Go stops at 10,000).
const leanBlockingMax = 64

// leanBufSize is the read buffer of a connection: a 4 KiB page and its
// headers arrive in one read.
const leanBufSize = 16 << 10

// errLeanFallback is an answer the lean path does not read: the request
// goes through net/http instead.
var errLeanFallback = errors.New("client: answer not read by the lean HTTP path")

// leanClient is a pool of kept-alive connections to one HTTP service.
type leanClient struct {
	base     string // the service's URL, for messages
	db       string // the database whose chunks it reads
	dialAddr string // host:port
	host     string // the Host header
	prefix   string // escaped base path, no trailing slash
	auth     string // "Authorization: Bearer …\r\n", or ""
	maxIdle  int
	dialer   net.Dialer
	poll     bool         // on Go's network poller rather than blocking calls
	spin     *spin.Policy // how a blocking read polls first (blocking_unix.go)

	// blocking counts the connections on blocking calls: each holds a
	// thread while its request is in flight, so there are at most
	// leanBlockingMax; more go through the poller.
	blocking atomic.Int32

	mu     sync.Mutex
	idle   []*leanConn // most recently used last
	closed bool

	// cluster is called when an answer says the service is a node of a
	// cluster (api.HeaderCluster); nil: not asked.
	cluster func()
}

// leanConn is one connection; it belongs to one request at a time.
type leanConn struct {
	nc        net.Conn
	br        *bufio.Reader
	l         *leanClient // for the Host and Authorization headers
	blocking  bool        // counted in l.blocking
	req       []byte      // the request being written
	deadline  time.Time   // the deadline set on nc
	idleSince time.Time   // when it went back to the pool
	reused    bool        // it has carried a request before
}

// newLeanClient returns the lean path for u, or nil when u is not plain
// HTTP to a host and a path it can write as they are, or when turned off.
func newLeanClient(u *url.URL, base, db, token string, maxIdle int, sp *spin.Policy) *leanClient {
	if u.Scheme != "http" || os.Getenv(leanEnv) == "0" || u.RawQuery != "" || u.User != nil {
		return nil
	}
	if !plainASCII(u.Host, false) || !plainASCII(u.Path, true) || (token != "" && !headerValue(token)) {
		return nil // net/http knows the escaping, the zones and the errors
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	l := &leanClient{
		base:     base,
		db:       db,
		dialAddr: net.JoinHostPort(u.Hostname(), port),
		host:     u.Host,
		prefix:   strings.TrimSuffix(u.Path, "/"),
		maxIdle:  maxIdle,
		dialer:   net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second},
		poll:     os.Getenv(leanEnv) == "poll",
		spin:     sp,
	}
	if token != "" {
		l.auth = "Authorization: Bearer " + token + "\r\n"
	}
	return l
}

// plainASCII reports whether s is letters, digits and -._~: (and / in
// a path): nothing that needs escaping or a zone.
func plainASCII(s string, path bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == '~':
		case c == ':' || c == '[' || c == ']':
			if path {
				return false
			}
		case c == '/':
			if !path {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// headerValue reports whether s can be sent as a header value as it is.
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// leanPipelineMax is the most chunks a batch asks for on the lean path:
// their GETs written at once on one connection, the answers read in
// order (HTTP/1.1 pipelining; chunkd serve answers a connection's
// requests in order, on its goroutine). A batch through net/http (a POST)
// costs a few goroutine hand-offs on each side, each a thread wake-up:
// on this project's 2-core VM 4 pages took a p50 of 421 µs that way
// where one GET took 108 (BenchmarkPageRead). A larger batch is a POST.
const leanPipelineMax = 16

// getChunk is httpService.get on the lean path: errLeanFallback when the
// answer is not one it reads.
func (l *leanClient) getChunk(ctx context.Context, a addr.Addr) (reply, error) {
	var r reply
	_, err := l.getMany(ctx, []addr.Addr{a}, func(_ int, got reply) { r = got })
	return r, err
}

// getMany is httpService.getMany on the lean path, for at most
// leanPipelineMax addresses: fn(j, reply) for each, in order. It returns
// how many it answered; errLeanFallback when an answer is not one it
// reads (the rest, from that one on, are for net/http).
func (l *leanClient) getMany(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) (int, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return 0, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", l.base, err)}
		}
		lc, err := l.conn(ctx)
		if err != nil {
			return 0, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", l.base, err)}
		}
		done, keep, err := lc.exchange(ctx, as, fn)
		var idle *idleClosedError
		switch {
		case errors.As(err, &idle): // before any answer: the write, or the first answer's first byte
			lc.close()
			if attempt == 0 && ctx.Err() == nil {
				continue // the service closed it while it was idle: once more, on a fresh one
			}
			return 0, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", l.base, idle.err)}
		case keep:
			l.put(lc)
		default:
			lc.close()
		}
		return done, err
	}
}

// conn returns an idle connection, or dials a new one.
func (l *leanClient) conn(ctx context.Context) (*leanConn, error) {
	now := time.Now()
	l.mu.Lock()
	for len(l.idle) > 0 {
		lc := l.idle[len(l.idle)-1]
		l.idle[len(l.idle)-1] = nil
		l.idle = l.idle[:len(l.idle)-1]
		if now.Sub(lc.idleSince) < leanIdleTimeout {
			l.mu.Unlock()
			return lc, nil
		}
		lc.close() // too old: the service may be closing it right now
	}
	l.mu.Unlock()
	nc, err := l.dialer.DialContext(ctx, "tcp", l.dialAddr)
	if err != nil {
		return nil, err
	}
	lc := &leanConn{nc: nc, l: l}
	if !l.poll && l.blocking.Add(1) <= leanBlockingMax {
		lc.nc = blocking(nc, l.spin)
		_, lc.blocking = lc.nc.(*blockingConn)
	}
	if !l.poll && !lc.blocking {
		l.blocking.Add(-1) // over the bound, or the descriptor could not be taken
	}
	lc.br = bufio.NewReaderSize(lc.nc, leanBufSize)
	return lc, nil
}

// put returns lc to the pool, or closes it when the pool is full or
// closed.
func (l *leanClient) put(lc *leanConn) {
	lc.idleSince = time.Now()
	lc.reused = true
	l.mu.Lock()
	if l.closed || len(l.idle) >= l.maxIdle {
		l.mu.Unlock()
		lc.close()
		return
	}
	l.idle = append(l.idle, lc)
	l.mu.Unlock()
}

// close closes the idle connections; the ones in use are closed when
// their requests end.
func (l *leanClient) close() {
	l.mu.Lock()
	idle := l.idle
	l.idle, l.closed = nil, true
	l.mu.Unlock()
	for _, lc := range idle {
		lc.close()
	}
}

func (lc *leanConn) close() {
	if lc.nc.Close() == nil && lc.blocking {
		lc.l.blocking.Add(-1)
	}
}

// idleClosedError is a kept-alive connection that failed before any byte
// of the answer came back: the service had closed it while idle. (The
// request is a GET, safe to send again.)
type idleClosedError struct{ err error }

func (e *idleClosedError) Error() string { return e.err.Error() }

// aLongTimeAgo is a deadline that has passed: it ends a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes the GETs of as and reads their answers, calling fn
// for each. keep reports whether the connection may carry another
// request; done how many answers fn was given.
func (lc *leanConn) exchange(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) (done int, keep bool, err error) {
	dl, hasDeadline := ctx.Deadline()
	if !dl.Equal(lc.deadline) {
		if err := lc.nc.SetDeadline(dl); err != nil {
			return 0, false, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", lc.l.base, err)}
		}
		lc.deadline = dl
	}
	// A cancel ends the blocked write or read through the deadline; the
	// connection is not kept after that.
	stop := context.AfterFunc(ctx, func() { lc.nc.SetDeadline(aLongTimeAgo) }) //nolint:errcheck // closing anyway
	done, keep, err = lc.roundTrip(as, fn)
	if !stop() {
		keep = false // its deadline is in the past
	}
	if hasDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline is the context's: wait the moment it
		// may take the context to notice, so that the error says so (and
		// no one takes it for the service's failure).
		<-ctx.Done()
	}
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		// The cancel or the deadline ended it (never retried).
		err = &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", lc.l.base, ctxErr)}
	}
	return done, keep, err
}

// roundTrip is exchange without the context: the GETs in one write, then
// the answers in order.
func (lc *leanConn) roundTrip(as []addr.Addr, fn func(j int, r reply)) (int, bool, error) {
	l := lc.l
	lc.req = lc.req[:0]
	for _, a := range as {
		lc.req = append(lc.req, "GET "...)
		lc.req = append(lc.req, l.prefix...)
		lc.req = append(lc.req, api.ChunkPath(l.db, a)...)
		lc.req = append(lc.req, " HTTP/1.1\r\nHost: "...)
		lc.req = append(lc.req, l.host...)
		lc.req = append(lc.req, "\r\nUser-Agent: chunkd\r\n"...)
		lc.req = append(lc.req, l.auth...)
		lc.req = append(lc.req, "\r\n"...)
	}
	if _, err := lc.nc.Write(lc.req); err != nil {
		if lc.reused && closedByPeer(err) {
			return 0, false, &idleClosedError{err}
		}
		return 0, false, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", lc.l.base, err)}
	}
	keep := true
	for j, a := range as {
		r, k, err := lc.readAnswer(a, j == 0)
		if err != nil {
			// An error answer read whole keeps the connection if no
			// answer is left to read on it.
			return j, k && j == len(as)-1, err
		}
		r.more = j < len(as)-1 && lc.br.Buffered() > 0
		fn(j, r)
		if keep = k; !keep && j < len(as)-1 {
			// The service ends the connection after this answer (it is
			// shutting down): the rest are for net/http.
			return j + 1, false, errLeanFallback
		}
	}
	return len(as), keep, nil
}

// readAnswer reads the answer to the GET of chunk a (first: the first of
// the connection's answers to a write). keep reports whether the
// connection may carry another request.
func (lc *leanConn) readAnswer(a addr.Addr, first bool) (reply, bool, error) {
	resp, err := lc.readHead(first)
	if err != nil {
		var idle *idleClosedError
		if errors.As(err, &idle) || errors.Is(err, errLeanFallback) {
			return reply{}, false, err
		}
		return reply{}, false, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", lc.l.base, err)}
	}
	switch resp.status {
	case http.StatusOK:
		if resp.length > api.MaxFrameLen {
			return reply{}, false, &serviceError{err: fmt.Errorf("cache service %s: chunk %s of %d bytes is above the limit of %d", lc.l.base, a, resp.length, api.MaxFrameLen)}
		}
		data := make([]byte, resp.length)
		if _, err := io.ReadFull(lc.br, data); err != nil {
			return reply{}, false, &serviceError{err: fmt.Errorf("cache service %s: read chunk %s: %w", lc.l.base, a, unexpectedEOF(err))}
		}
		return reply{data: data, tier: resp.tier, found: true}, !resp.close, nil
	case http.StatusNotFound: // no such chunk, or no such database
		keep, err := lc.discard(resp)
		if err != nil {
			return reply{}, false, &serviceError{err: fmt.Errorf("cache service %s: read chunk %s: %w", lc.l.base, a, err)}
		}
		return reply{}, keep, nil
	}
	// Another status: the error body is read as net/http's would be.
	n := min(resp.length, maxLeanErrorBody)
	body := make([]byte, n)
	if _, err := io.ReadFull(lc.br, body); err != nil {
		body = body[:0] // cut short: the status text is the message
	}
	e := statusError(lc.l.base, &http.Response{StatusCode: resp.status, Status: strconv.Itoa(resp.status) + " " + http.StatusText(resp.status),
		Body: io.NopCloser(bytes.NewReader(body))})
	return reply{}, resp.length == n && !resp.close, e
}

// maxLeanErrorBody is how much of an error body is read: what
// api.ReadError reads.
const maxLeanErrorBody = 64 << 10

// discard reads resp's body; keep reports whether the connection is
// ready for another request.
func (lc *leanConn) discard(resp leanHead) (keep bool, err error) {
	if resp.length > maxLeanErrorBody {
		return false, nil
	}
	if _, err := lc.br.Discard(int(resp.length)); err != nil {
		return false, unexpectedEOF(err)
	}
	return !resp.close, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// closedByPeer reports whether err is the end of a connection the other
// side closed.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// leanHead is what the lean path takes from an answer's status line and
// headers.
type leanHead struct {
	status int
	length int64 // Content-Length
	tier   api.Tier
	close  bool // Connection: close
}

// maxLeanHead bounds the status line and headers of an answer.
const maxLeanHead = 64 << 10

// readHead reads the status line and the headers. It returns
// errLeanFallback for an answer the lean path does not read, and an
// *idleClosedError when the connection was reused and ended before the
// first byte of the first answer to a write.
func (lc *leanConn) readHead(first bool) (leanHead, error) {
	line, err := lc.br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && first && lc.reused && closedByPeer(err) {
			return leanHead{}, &idleClosedError{err}
		}
		if err == bufio.ErrBufferFull {
			return leanHead{}, errLeanFallback
		}
		return leanHead{}, unexpectedEOF(err)
	}
	// HTTP/1.1 200 OK
	line = trimEOL(line)
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return leanHead{}, errLeanFallback
	}
	status := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return leanHead{}, errLeanFallback
		}
		status = 10*status + int(c-'0')
	}
	// 1xx, 204 and 304 have no body; chunkd serve sends none of them.
	if status < 200 || status == http.StatusNoContent || status == http.StatusNotModified || status > 599 {
		return leanHead{}, errLeanFallback
	}
	h := leanHead{status: status, length: -1}
	total := len(line)
	for {
		line, err := lc.br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				return leanHead{}, errLeanFallback
			}
			return leanHead{}, unexpectedEOF(err)
		}
		if total += len(line); total > maxLeanHead {
			return leanHead{}, errLeanFallback
		}
		line = trimEOL(line)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return leanHead{}, errLeanFallback // a folded header
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return leanHead{}, errLeanFallback
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := parseLength(value)
			if !ok || (h.length >= 0 && n != h.length) {
				return leanHead{}, errLeanFallback
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return leanHead{}, errLeanFallback
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				if bytes.EqualFold(bytes.Trim(tok, " \t"), []byte("close")) {
					h.close = true
				}
			}
		case lc.l.cluster != nil && bytes.EqualFold(name, []byte(api.HeaderCluster)):
			lc.l.cluster()
		case bytes.EqualFold(name, []byte(api.HeaderTier)):
			h.tier, _ = api.ParseTier(string(value)) // unknown: TierUnspecified
		}
	}
	if h.length < 0 {
		return leanHead{}, errLeanFallback // the body runs to the end of the connection
	}
	return h, nil
}

// parseLength parses a Content-Length: decimal digits only.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = 10*n + int64(c-'0')
	}
	return n, true
}

func trimEOL(line []byte) []byte {
	line = line[:len(line)-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line
}
