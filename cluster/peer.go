package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chunkd/chunkd/api"
)

// The peer protocol, over the nodes' HTTP APIs:
//
//	POST /v1/cluster/hello           body and answer: a ClusterMember (JSON)
//	GET  /v1/cluster/read?key=K&off=O&n=N   answer: frames
//
// A read's answer is a stream of frames, each a kind byte and a 4-byte
// big-endian length, then that many bytes:
//
//	'K' keep-alive (empty): the owner is alive, working on it; the first
//	    frame is one, sent before the owner opens the file
//	'D' the next bytes of the range
//	'E' an error, as text: the read failed; nothing after it
//	'Z' the end: every byte was sent
//
// A peer request carries its credential in the Chunkd-Peer header (with a
// cluster secret) or its TLS client certificate.
const (
	pathHello = "/v1/cluster/hello"
	pathRead  = "/v1/cluster/read"

	headerPeer = "Chunkd-Peer"
	frameType  = "application/x-chunkd-peer-frames"

	frameKeep  = 'K'
	frameData  = 'D'
	frameError = 'E'
	frameEnd   = 'Z'

	maxFrame = 1 << 20
)

// peerClient makes this node's requests to its peers.
type peerClient struct {
	n  *Node
	hc *http.Client
	tr *http.Transport
}

func newPeerClient(n *Node) *peerClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     n.cfg.TLS,
		// The head of an answer comes at once (the first frame is sent
		// before any work): a peer that does not send it in HedgeAfter is
		// hedged, so there is no need for a header timeout here.
	}
	return &peerClient{n: n, tr: tr, hc: &http.Client{Transport: tr}}
}

func (p *peerClient) close() { p.tr.CloseIdleConnections() }

// sign adds this node's credential to a peer request.
func (p *peerClient) sign(req *http.Request) {
	if p.n.cfg.Secret == "" {
		return
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := peerMAC(p.n.cfg.Secret, p.n.cfg.ID, ts, req.Method, req.URL.RequestURI())
	req.Header.Set(headerPeer, p.n.cfg.ID+" "+ts+" "+base64.RawURLEncoding.EncodeToString(mac))
}

func peerMAC(secret, id, ts, method, uri string) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(h, "chunkd-peer\n%s\n%s\n%s\n%s", id, ts, method, uri)
	return h.Sum(nil)
}

// gossipKey is the gossip's AES-256 key, from the cluster secret.
func gossipKey(secret string) []byte { return DerivedKey(secret, "chunkd-gossip") }

// DerivedKey is a 32-byte key for one use (purpose), derived from the
// cluster secret: every node derives the same.
func DerivedKey(secret, purpose string) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(purpose))
	return h.Sum(nil)
}

// maxSkew is how far a peer request's time may be from this node's.
const maxSkew = time.Minute

// errNotPeer refuses a request that is not a peer's.
var errNotPeer = errors.New("peer routes are for the cluster's nodes: no valid peer credential (the cluster secret's signature, or a verified TLS client certificate)")

// checkPeer says whether r comes from a peer: a valid signature with the
// cluster secret; without a secret, a verified TLS client certificate
// when the listener asks for them; with neither, anyone (the service is
// open: refused at setup when it has tokens).
func (n *Node) checkPeer(r *http.Request) error {
	if n.cfg.Secret == "" {
		if n.cfg.ClientCerts && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			return errNotPeer
		}
		return nil
	}
	f := strings.Fields(r.Header.Get(headerPeer))
	if len(f) != 3 {
		return errNotPeer
	}
	sec, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return errNotPeer
	}
	if d := time.Since(time.Unix(sec, 0)); d > maxSkew || d < -maxSkew {
		return fmt.Errorf("%w: its time is %v from this node's (clocks must agree within %v)", errNotPeer, d.Round(time.Second), maxSkew)
	}
	got, err := base64.RawURLEncoding.DecodeString(f[2])
	if err != nil || !hmac.Equal(got, peerMAC(n.cfg.Secret, f[0], f[1], r.Method, r.URL.RequestURI())) {
		return errNotPeer
	}
	return nil
}

// hello introduces this node to the node at base and returns what it says
// of itself.
func (p *peerClient) hello(ctx context.Context, base string, self api.ClusterMember) (api.ClusterMember, error) {
	body, _ := json.Marshal(self)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+pathHello, bytes.NewReader(body))
	if err != nil {
		return api.ClusterMember{}, err
	}
	req.Header.Set("Content-Type", api.ContentTypeJSON)
	p.sign(req)
	resp, err := p.hc.Do(req)
	if err != nil {
		return api.ClusterMember{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return api.ClusterMember{}, fmt.Errorf("%s: %s: %s", base, resp.Status, bytes.TrimSpace(msg))
	}
	var info api.ClusterMember
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&info); err != nil {
		return api.ClusterMember{}, fmt.Errorf("%s: hello: %w", base, err)
	}
	if info.ID == "" {
		return api.ClusterMember{}, fmt.Errorf("%s: hello: no node id", base)
	}
	return info, nil
}

// peerError is a failed read from a peer. conn marks a failure to reach
// it (refused, reset, cut), which takes it out of the placement at once.
type peerError struct {
	conn bool
	err  error
}

func (e *peerError) Error() string { return e.err.Error() }
func (e *peerError) Unwrap() error { return e.err }

// read reads len(p) bytes of key from off from the owner at base into p,
// calling alive at every sign of life (the answer's head, each frame).
func (p *peerClient) read(ctx context.Context, base, key string, buf []byte, off int64, alive func()) error {
	q := url.Values{"key": {key}, "off": {strconv.FormatInt(off, 10)}, "n": {strconv.Itoa(len(buf))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+pathRead+"?"+q.Encode(), nil)
	if err != nil {
		return &peerError{err: err}
	}
	p.sign(req)
	resp, err := p.hc.Do(req)
	if err != nil {
		return &peerError{conn: ctx.Err() == nil, err: err}
	}
	defer resp.Body.Close()
	alive()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return &peerError{err: fmt.Errorf("%s: %s: %s", base, resp.Status, bytes.TrimSpace(msg))}
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	got := 0
	var head [5]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return &peerError{conn: ctx.Err() == nil, err: fmt.Errorf("%s: answer cut after %d of %d bytes: %w", base, got, len(buf), err)}
		}
		alive()
		size := int(binary.BigEndian.Uint32(head[1:]))
		if size > maxFrame {
			return &peerError{err: fmt.Errorf("%s: a frame of %d bytes", base, size)}
		}
		switch head[0] {
		case frameKeep:
			if _, err := br.Discard(size); err != nil {
				return &peerError{conn: true, err: err}
			}
		case frameData:
			if got+size > len(buf) {
				return &peerError{err: fmt.Errorf("%s: sent more than the %d bytes asked", base, len(buf))}
			}
			if _, err := io.ReadFull(br, buf[got:got+size]); err != nil {
				return &peerError{conn: ctx.Err() == nil, err: fmt.Errorf("%s: answer cut after %d of %d bytes: %w", base, got, len(buf), err)}
			}
			got += size
		case frameError:
			msg := make([]byte, min(size, 4096))
			io.ReadFull(br, msg)
			return &peerError{err: fmt.Errorf("%s: %s", base, msg)}
		case frameEnd:
			if got != len(buf) {
				return &peerError{err: fmt.Errorf("%s: ended after %d of %d bytes", base, got, len(buf))}
			}
			return nil
		default:
			return &peerError{err: fmt.Errorf("%s: unknown frame %q", base, head[0])}
		}
	}
}

// frameWriter writes an answer's frames; keep-alives come from another
// goroutine, so writes are locked.
type frameWriter struct {
	mu   sync.Mutex
	w    io.Writer
	rc   *http.ResponseController
	last time.Time
	err  error
}

func (f *frameWriter) frame(kind byte, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	var head [5]byte
	head[0] = kind
	binary.BigEndian.PutUint32(head[1:], uint32(len(b)))
	if _, err := f.w.Write(head[:]); err != nil {
		f.err = err
		return err
	}
	if len(b) > 0 {
		if _, err := f.w.Write(b); err != nil {
			f.err = err
			return err
		}
	}
	f.last = time.Now()
	if kind != frameData {
		f.err = f.rc.Flush()
	}
	return f.err
}

// Write sends p as data frames (cache.FileReader.Copy writes here).
func (f *frameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), maxFrame)
		if err := f.frame(frameData, p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = f.rc.Flush()
	}
	return n, f.err
}

// keepAlive sends a keep-alive every interval without other frames until
// stop is called.
func (f *frameWriter) keepAlive(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f.mu.Lock()
				idle := time.Since(f.last) >= interval
				f.mu.Unlock()
				if idle && f.frame(frameKeep, nil) != nil {
					return
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
