package store

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// WithLatency wraps s so that every request first waits rtt, and, when
// bytesPerSec > 0, also waits as long as moving its payload at that rate
// would take. It emulates a far-away object store on a fast local one (for
// benchmarks and tests: this is what a 30 ms round trip to S3 feels like).
//
// Every wait honours ctx: a cancelled request returns an error wrapping
// ctx.Err(). Reads wait rtt before the request and the transfer time after
// it; writes wait for both before the request, as an upload would. A List
// pays one round trip per 1000 keys returned, as S3 pages its listings.
// Streams opened with Open are throttled as they are read.
func WithLatency(s Store, rtt time.Duration, bytesPerSec int64) Store {
	if rtt < 0 {
		rtt = 0
	}
	if bytesPerSec < 0 {
		bytesPerSec = 0
	}
	return &latencyStore{s: s, rtt: rtt, bw: bytesPerSec}
}

type latencyStore struct {
	s   Store
	rtt time.Duration
	bw  int64
}

// transfer returns how long moving n bytes takes.
func (l *latencyStore) transfer(n int64) time.Duration {
	if l.bw <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / float64(l.bw) * float64(time.Second))
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *latencyStore) wait(ctx context.Context, op, key string, d time.Duration) error {
	if err := sleep(ctx, d); err != nil {
		return fmt.Errorf("%s %q in %s: %w", op, key, l.s.String(), err)
	}
	return nil
}

func (l *latencyStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := l.wait(ctx, "read", key, l.rtt); err != nil {
		return 0, err
	}
	n, err := l.s.ReadAt(ctx, key, p, off)
	if werr := l.wait(ctx, "read", key, l.transfer(int64(n))); werr != nil && err == nil {
		return n, werr
	}
	return n, err
}

func (l *latencyStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := l.wait(ctx, "get", key, l.rtt); err != nil {
		return nil, err
	}
	b, err := l.s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := l.wait(ctx, "get", key, l.transfer(int64(len(b)))); err != nil {
		return nil, err
	}
	return b, nil
}

func (l *latencyStore) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := l.wait(ctx, "open", key, l.rtt); err != nil {
		return nil, Info{}, err
	}
	rc, info, err := l.s.Open(ctx, key)
	if err != nil || l.bw <= 0 {
		return rc, info, err
	}
	return &throttledReader{rc: rc, ctx: ctx, l: l, start: time.Now()}, info, nil
}

// OpenRange waits a round trip, then streams the range no faster than the
// emulated bandwidth, as Open streams a whole object: each ranged stream
// has the bandwidth to itself, as each connection to S3 does.
func (l *latencyStore) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := l.wait(ctx, "open", key, l.rtt); err != nil {
		return nil, err
	}
	rc, err := OpenRange(ctx, l.s, key, off, n)
	if err != nil || l.bw <= 0 {
		return rc, err
	}
	return &throttledReader{rc: rc, ctx: ctx, l: l, start: time.Now()}, nil
}

// ReadTail waits a round trip and the tail's transfer time, as ReadAt does:
// one request (store.TailReader), whatever s does underneath.
func (l *latencyStore) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	if err := l.wait(ctx, "read", key, l.rtt); err != nil {
		return 0, 0, err
	}
	n, size, err := ReadTail(ctx, l.s, key, p)
	if werr := l.wait(ctx, "read", key, l.transfer(int64(n))); werr != nil && err == nil {
		return n, size, werr
	}
	return n, size, err
}

// throttledReader delivers a stream no faster than the emulated bandwidth,
// and at most streamWindow bytes a Read, as a socket gives what has
// arrived: a Read of a large buffer does not hold the first bytes back
// until the whole buffer's transfer time has passed.
type throttledReader struct {
	rc    io.ReadCloser
	ctx   context.Context
	l     *latencyStore
	start time.Time
	n     int64
}

// streamWindow is the most a throttled Read returns: about a TCP receive
// window.
const streamWindow = 64 << 10

func (r *throttledReader) Read(p []byte) (int, error) {
	if len(p) > streamWindow {
		p = p[:streamWindow]
	}
	n, err := r.rc.Read(p)
	r.n += int64(n)
	if serr := sleep(r.ctx, time.Until(r.start.Add(r.l.transfer(r.n)))); serr != nil && err == nil {
		err = serr
	}
	return n, err
}

func (r *throttledReader) Close() error { return r.rc.Close() }

func (l *latencyStore) Put(ctx context.Context, key string, data []byte) error {
	if err := l.wait(ctx, "put", key, l.rtt+l.transfer(int64(len(data)))); err != nil {
		return err
	}
	return l.s.Put(ctx, key, data)
}

func (l *latencyStore) Head(ctx context.Context, key string) (Info, error) {
	if err := l.wait(ctx, "head", key, l.rtt); err != nil {
		return Info{}, err
	}
	return l.s.Head(ctx, key)
}

func (l *latencyStore) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := l.wait(ctx, "list", prefix, l.rtt); err != nil {
		return nil, err
	}
	infos, err := l.s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if pages := len(infos) / 1000; pages > 0 {
		if err := l.wait(ctx, "list", prefix, time.Duration(pages)*l.rtt); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

func (l *latencyStore) Delete(ctx context.Context, key string) error {
	if err := l.wait(ctx, "delete", key, l.rtt); err != nil {
		return err
	}
	return l.s.Delete(ctx, key)
}

func (l *latencyStore) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	if err := l.wait(ctx, "put", key, l.rtt+l.transfer(int64(len(data)))); err != nil {
		return "", err
	}
	return l.s.PutIf(ctx, key, data, ifVersion)
}

// String names the wrapped store; the emulated latency is not part of it.
func (l *latencyStore) String() string { return l.s.String() }

// Unwrap returns the store behind the emulated latency.
func (l *latencyStore) Unwrap() Store { return l.s }

func (l *latencyStore) Close() error { return l.s.Close() }

// Counting wraps a store and counts the requests made through it and the
// object bytes moved (read plus written). It is safe for concurrent use;
// tests and benchmarks use it to check how many round trips a read took.
type Counting struct {
	Store
	requests atomic.Int64
	bytes    atomic.Int64
}

// NewCounting returns a Counting wrapper around s.
func NewCounting(s Store) *Counting { return &Counting{Store: s} }

// Requests returns the number of requests made so far (String and Close
// are not requests).
func (c *Counting) Requests() int64 { return c.requests.Load() }

// Bytes returns the number of object bytes read and written so far.
func (c *Counting) Bytes() int64 { return c.bytes.Load() }

// Reset sets both counters back to zero.
func (c *Counting) Reset() {
	c.requests.Store(0)
	c.bytes.Store(0)
}

func (c *Counting) count(n int) {
	c.requests.Add(1)
	c.bytes.Add(int64(n))
}

// ReadAt counts one request and the bytes read.
func (c *Counting) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, err := c.Store.ReadAt(ctx, key, p, off)
	c.count(n)
	return n, err
}

// Get counts one request and the bytes read.
func (c *Counting) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.Store.Get(ctx, key)
	c.count(len(b))
	return b, err
}

// Open counts one request, and the bytes as the stream is read.
func (c *Counting) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	rc, info, err := c.Store.Open(ctx, key)
	c.count(0)
	if err != nil {
		return rc, info, err
	}
	return countingReader{rc, &c.bytes}, info, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// OpenRange counts one request, and the bytes as the stream is read.
func (c *Counting) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := OpenRange(ctx, c.Store, key, off, n)
	c.count(0)
	if err != nil {
		return rc, err
	}
	return countingReader{rc, &c.bytes}, nil
}

// Put counts one request and the bytes written.
func (c *Counting) Put(ctx context.Context, key string, data []byte) error {
	c.count(len(data))
	return c.Store.Put(ctx, key, data)
}

// PutIf counts one request and the bytes written.
func (c *Counting) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	c.count(len(data))
	return c.Store.PutIf(ctx, key, data, ifVersion)
}

// Head counts one request.
func (c *Counting) Head(ctx context.Context, key string) (Info, error) {
	c.count(0)
	return c.Store.Head(ctx, key)
}

// List counts one request.
func (c *Counting) List(ctx context.Context, prefix string) ([]Info, error) {
	c.count(0)
	return c.Store.List(ctx, prefix)
}

// Delete counts one request.
func (c *Counting) Delete(ctx context.Context, key string) error {
	c.count(0)
	return c.Store.Delete(ctx, key)
}

// ParseBandwidth parses a transfer rate such as "100MB", "12.5MiB/s",
// "1G" or "65536" into bytes per second. Decimal suffixes (K, M, G, KB,
// MB, GB) are powers of 1000, binary ones (KiB, MiB, GiB) powers of 1024;
// a trailing "/s" and a final "B" are optional, and case is ignored.
func ParseBandwidth(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(strings.ToLower(s))
	s = strings.TrimSuffix(s, "/s")
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9},
		{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1},
	} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v <= 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("bad bandwidth %q: want a positive rate such as 100MB or 1GiB", orig)
	}
	return int64(v * mult), nil
}

// stripLatencyParams removes the latency and bandwidth query parameters
// from a store URL, leaving the others as they were, and returns their
// values; found reports whether either was present.
func stripLatencyParams(u *url.URL) (rtt time.Duration, bw int64, found bool, err error) {
	if u.RawQuery == "" {
		return 0, 0, false, nil
	}
	var kept []string
	for _, part := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		if k != "latency" && k != "bandwidth" {
			kept = append(kept, part)
			continue
		}
		found = true
		if uv, uerr := url.QueryUnescape(v); uerr == nil {
			v = uv
		}
		if k == "latency" {
			rtt, err = time.ParseDuration(v)
			if err != nil || rtt < 0 {
				return 0, 0, false, fmt.Errorf("bad latency %q: want a duration such as 30ms", v)
			}
		} else if bw, err = ParseBandwidth(v); err != nil {
			return 0, 0, false, err
		}
	}
	u.RawQuery = strings.Join(kept, "&")
	return rtt, bw, found, nil
}
