package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/spin"
)

// reply is the service's answer for one address, not yet checked.
type reply struct {
	data  []byte
	tier  api.Tier
	found bool
	// more says the next answer of the same batch is already in hand
	// (buffered): the caller may hold this one to check both together
	// (addr.OfAll), at no cost in latency.
	more bool
}

// service is a cache service connection, over HTTP or gRPC. A database
// the service does not know is answered as "not found" for every chunk.
type service interface {
	// get asks for one chunk.
	get(ctx context.Context, a addr.Addr) (reply, error)
	// getMany asks for at most api.MaxBatch chunks in one request and
	// calls fn at most once per position j of as, from one goroutine.
	// On an error, positions fn was not called for were not answered.
	getMany(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) error
	// root asks for the root of the database's current version, as the
	// service knows it (at most its --manifest-ttl old), or, with fresh,
	// checked against the store's manifest first.
	root(ctx context.Context, fresh bool) (addr.Addr, error)
	close() error
	// inline reports whether get runs in the calling goroutine alone,
	// with no hand-off to another.
	inline() bool
	// String is the service's address, for messages.
	String() string
}

// serviceError is a failed service request. conn marks a failure to
// reach the service at all, which makes the client back off from it.
type serviceError struct {
	conn    bool
	refused bool // the service refused the token (conn is set too)
	err     error
}

func (e *serviceError) Error() string { return e.err.Error() }
func (e *serviceError) Unwrap() error { return e.err }

// newService connects to the service at rawURL (no I/O yet: connections
// are made on first use).
func newService(rawURL, db string, concurrency int, auth serviceAuth, sp *spin.Policy) (service, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("client: service address %q: want http://host:port or grpc://host:port (https:// or grpcs:// for TLS)", rawURL)
	}
	var tlsCfg *tls.Config
	switch u.Scheme {
	case "https", "grpcs":
		if tlsCfg, err = auth.tlsConfig(); err != nil {
			return nil, err
		}
	case "http", "grpc":
		if auth.tlsOnly() {
			return nil, fmt.Errorf("client: service address %q is not TLS, yet a CA or client certificate is given: use https:// or grpcs://", rawURL)
		}
	}
	switch u.Scheme {
	case "http", "https":
		return newHTTPService(u, db, concurrency, tlsCfg, auth.token, sp), nil
	case "grpc", "grpcs":
		return newGRPCService(u, db, tlsCfg, auth.token)
	}
	return nil, fmt.Errorf("client: service address %q: unknown scheme %q (want http, https, grpc or grpcs)", rawURL, u.Scheme)
}

// httpService talks to the service's HTTP API.
type httpService struct {
	base  string // scheme://host[/path], no trailing slash
	db    string
	hc    *http.Client
	tr    *http.Transport
	token string      // "" sends no Authorization header
	lean  *leanClient // nil: every request through net/http
	// cluster is called when an answer says the service is a node of a
	// cluster (api.HeaderCluster); nil: not asked.
	cluster func()
}

// sawCluster calls h.cluster if resp says the service is in a cluster.
func (h *httpService) sawCluster(resp *http.Response) {
	if h.cluster != nil && resp.Header.Get(api.HeaderCluster) != "" {
		h.cluster()
	}
}

// onCluster makes fn be called when an answer says the service is a node
// of a cluster.
func (h *httpService) onCluster(fn func()) {
	h.cluster = fn
	if h.lean != nil {
		h.lean.cluster = fn
	}
}

func newHTTPService(u *url.URL, db string, concurrency int, tlsCfg *tls.Config, token string, sp *spin.Policy) *httpService {
	tr := &http.Transport{
		// A cache service is near the client; a proxy only adds latency.
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   2 * time.Second, // hedging covers the wait; this only ends hopeless dials
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// Keep enough idle connections for every concurrent reader (SQLite
		// connections, batch parts): the default of 2 per host would close
		// and redial connections under any parallel load.
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(64, 4*concurrency),
		IdleConnTimeout:     90 * time.Second,
		// Chunks are mostly compressed data already.
		DisableCompression: true,
		TLSClientConfig:    tlsCfg,
	}
	base := strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/")
	return &httpService{
		base:  base,
		db:    db,
		tr:    tr,
		hc:    &http.Client{Transport: tr},
		token: token,
		lean:  newLeanClient(u, base, db, token, tr.MaxIdleConnsPerHost, sp),
	}
}

// newRequest makes a request to the service, with the token.
func (h *httpService) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, body)
	if err != nil {
		return nil, err
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	return req, nil
}

func (h *httpService) String() string { return h.base }

func (h *httpService) inline() bool { return h.lean != nil }

func (h *httpService) close() error {
	if h.lean != nil {
		h.lean.close()
	}
	h.tr.CloseIdleConnections()
	return nil
}

// drain reads a little of what is left of a body, so that the connection
// can be reused, and closes it.
func drain(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, 64<<10)) //nolint:errcheck // best effort
	body.Close()
}

func (h *httpService) get(ctx context.Context, a addr.Addr) (reply, error) {
	if h.lean != nil {
		r, err := h.lean.getChunk(ctx, a)
		if err != errLeanFallback {
			return r, err
		}
	}
	return h.getNet(ctx, a)
}

// getNet is get through net/http.
func (h *httpService) getNet(ctx context.Context, a addr.Addr) (reply, error) {
	req, err := h.newRequest(ctx, http.MethodGet, api.ChunkPath(h.db, a), nil)
	if err != nil {
		return reply{}, &serviceError{err: err}
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return reply{}, &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", h.base, err)}
	}
	defer drain(resp.Body)
	h.sawCluster(resp)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound: // no such chunk, or no such database
		return reply{}, nil
	default:
		return reply{}, statusError(h.base, resp)
	}
	if resp.ContentLength > api.MaxFrameLen {
		return reply{}, &serviceError{err: fmt.Errorf("cache service %s: chunk %s of %d bytes is above the limit of %d", h.base, a, resp.ContentLength, api.MaxFrameLen)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, api.MaxFrameLen+1))
	if err != nil {
		return reply{}, &serviceError{err: fmt.Errorf("cache service %s: read chunk %s: %w", h.base, a, err)}
	}
	if len(data) > api.MaxFrameLen {
		return reply{}, &serviceError{err: fmt.Errorf("cache service %s: chunk %s is above the limit of %d bytes", h.base, a, api.MaxFrameLen)}
	}
	tier, _ := api.ParseTier(resp.Header.Get(api.HeaderTier)) // unknown: TierUnspecified
	return reply{data: data, tier: tier, found: true}, nil
}

func (h *httpService) root(ctx context.Context, fresh bool) (addr.Addr, error) {
	req, err := h.newRequest(ctx, http.MethodGet, api.RootPath(h.db, fresh), nil)
	if err != nil {
		return addr.Addr{}, err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return addr.Addr{}, fmt.Errorf("cache service %s: %w", h.base, err)
	}
	defer drain(resp.Body)
	h.sawCluster(resp)
	if resp.StatusCode == http.StatusNotFound {
		return addr.Addr{}, fmt.Errorf("cache service %s: %w: %w", h.base, ErrNoDatabase, api.ReadError(resp))
	}
	if resp.StatusCode != http.StatusOK {
		return addr.Addr{}, statusError(h.base, resp)
	}
	var info api.RootInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
		return addr.Addr{}, fmt.Errorf("cache service %s: database %q: %w", h.base, h.db, err)
	}
	root, err := addr.Parse(info.Root)
	return checkRoot(h.base, h.db, root, err, fresh, info.Stale)
}

// checkRoot is the end of every service's root: the answer parsed
// (perr, its error) and, when a fresh one was asked for, fresh.
func checkRoot(service, db string, root addr.Addr, perr error, fresh, stale bool) (addr.Addr, error) {
	if fresh && stale {
		return addr.Addr{}, errStaleRoot(service, db)
	}
	if perr != nil {
		return addr.Addr{}, fmt.Errorf("cache service %s: database %q: root: %w", service, db, perr)
	}
	return root, nil
}

// errStaleRoot is the error of a fresh root the service could not check.
func errStaleRoot(service, db string) error {
	return fmt.Errorf("cache service %s: database %q: a fresh root was asked for, but the service could not check the store's manifest", service, db)
}

// statusError describes an HTTP answer other than 200 and 404. A 503 (the
// service is shutting down, or its store is unreachable), a 502 (the store
// denies the service access), a 401 (no or an unknown token) and a 403 (a
// token without this database) are treated like a connection failure, as
// the gRPC client treats Unavailable: the client backs off rather than
// ask again for every read.
func statusError(base string, resp *http.Response) error {
	e := api.ReadError(resp)
	switch resp.StatusCode {
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", base, e)}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &serviceError{conn: true, refused: true, err: fmt.Errorf("cache service %s: %w", base, e)}
	}
	return &serviceError{err: fmt.Errorf("cache service %s: %w", base, e)}
}

func (h *httpService) getMany(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) error {
	if h.lean != nil && len(as) <= leanPipelineMax {
		done, err := h.lean.getMany(ctx, as, fn)
		if err != errLeanFallback {
			return err
		}
		// The rest through net/http, as a batch.
		return h.getManyNet(ctx, as[done:], func(j int, r reply) { fn(done+j, r) })
	}
	return h.getManyNet(ctx, as, fn)
}

// getManyNet is getMany through net/http: one POST of the addresses.
func (h *httpService) getManyNet(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) error {
	req, err := h.newRequest(ctx, http.MethodPost, api.ChunksPath(h.db), bytes.NewReader(api.EncodeAddresses(as)))
	if err != nil {
		return &serviceError{err: err}
	}
	req.Header.Set("Content-Type", api.ContentTypeBinary)
	// A batch read is safe to send again: this lets net/http retry it on a
	// fresh connection when a kept-alive one turns out to be closed,
	// rather than fail it (and make the client back off).
	req.Header["Idempotency-Key"] = nil
	resp, err := h.hc.Do(req)
	if err != nil {
		return &serviceError{conn: true, err: fmt.Errorf("cache service %s: %w", h.base, err)}
	}
	defer drain(resp.Body)
	h.sawCluster(resp)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound: // no such database
		for j := range as {
			fn(j, reply{})
		}
		return nil
	default:
		return statusError(h.base, resp)
	}
	seen := make([]bool, len(as))
	got := 0
	fr := api.NewFrameReader(resp.Body)
	for f, err := range fr.All() {
		if err != nil {
			return &serviceError{err: fmt.Errorf("cache service %s: batch cut short after %d of %d chunks: %w", h.base, got, len(as), err)}
		}
		if int(f.Index) >= len(as) || seen[f.Index] {
			return &serviceError{err: fmt.Errorf("cache service %s: batch of %d answered index %d twice or out of range", h.base, len(as), f.Index)}
		}
		seen[f.Index] = true
		got++
		fn(int(f.Index), reply{data: f.Data, tier: f.Tier, found: f.Found, more: fr.Buffered() > 0})
	}
	if got < len(as) {
		return &serviceError{err: fmt.Errorf("cache service %s: batch ended after %d of %d chunks", h.base, got, len(as))}
	}
	return nil
}

// backoff keeps the client away from a service it could not reach: for
// min after the first failure, doubling with each failure after a retry,
// up to max; a success resets it.
type backoff struct {
	min, max time.Duration
	until    atomic.Int64 // unix nanoseconds; 0 when not backing off
	mu       sync.Mutex   // serializes fail
	delay    time.Duration
}

// allow reports whether the service may be asked now.
func (b *backoff) allow() bool {
	u := b.until.Load()
	return u == 0 || time.Now().UnixNano() >= u
}

// fail records a connection failure. It returns the delay and whether a
// backoff started (false when one was already running: requests that were
// in flight together fail together, and count once).
func (b *backoff) fail() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now().UnixNano()
	if u := b.until.Load(); u != 0 && now < u {
		return b.delay, false
	}
	if b.delay == 0 {
		b.delay = b.min
	} else {
		b.delay = min(2*b.delay, b.max)
	}
	b.until.Store(now + int64(b.delay))
	return b.delay, true
}

// succeed records a request the service answered.
func (b *backoff) succeed() {
	if b.until.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.delay = 0
	b.until.Store(0)
	b.mu.Unlock()
}
