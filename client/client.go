// Package client reads the chunks of one database through chunkd's tiers,
// fastest first:
//
//  1. an in-process memory cache of decoded chunks, bounded by bytes;
//  2. the cache service (package server), over HTTP or gRPC, when one is
//     configured;
//  3. the object store itself: the database's manifest is read once, every
//     table file's index is opened once and kept in memory, and a chunk
//     costs one ranged read of its record (a batch costs one read per group
//     of nearby records, several at once).
//
// It is what the CLI, the SQLite VFS and the benchmarks read through.
//
// Nothing that arrives from the service or the store is trusted: every
// chunk is hashed and compared with its address before it is cached or
// returned. (The files of a same-host service, Options.LocalDir, were
// hashed by the service; their records' CRCs are checked.) A chunk from the service that does not match (or that the
// service does not have, or that it is slow to send) is read from the
// store instead; a chunk from the store that does not match is an error
// naming the address and the table file, never wrong data.
//
// The service is an optimisation, never a dependency: when it is down the
// client backs off from it (1 s, doubling to 30 s) and reads from the
// store; when it is slow the client hedges, asking the store too after
// Options.ServiceTimeout and taking whichever correct answer comes first.
// Its reads of the store are hedged too (store.Hedge): one slower than
// recent reads of its size (their 95th percentile) gets a second request.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/chunkmem"
	"github.com/chunkd/chunkd/internal/spin"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/maypok86/otter/v2"
)

// Defaults of Options.
const (
	// DefaultMemBytes is the default size of the memory tier.
	DefaultMemBytes = 256 << 20
	// DefaultServiceTimeout is how long the client waits for the service
	// before it also asks the store. A chunk the service holds in memory
	// or on disk arrives within a few milliseconds; one it must read
	// through from the store costs it one store round trip (about 30 ms on
	// S3) plus its own overhead. 50 ms lets that read-through finish
	// without a duplicate store request, yet bounds what a stalled service
	// costs a read to 50 ms plus one store round trip.
	DefaultServiceTimeout = 50 * time.Millisecond
	// DefaultGap is the default Options.Gap: records up to 64 KiB apart are
	// read together, since one more store request (~30 ms) costs far more
	// than moving 64 KiB.
	DefaultGap = 64 << 10
	// DefaultMaxRead is the default Options.MaxRead.
	DefaultMaxRead = 1 << 20
	// DefaultConcurrency is the default Options.Concurrency.
	DefaultConcurrency = 16
	// DefaultIndexTail is the default Options.IndexTail: one ranged read
	// of a table file's last 64 KiB usually gets its footer and whole index.
	DefaultIndexTail = 64 << 10
)

// Backoff bounds after the service fails to connect.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

// Options configure a Client.
type Options struct {
	// Store holds the database: the tier of last resort. It may be nil
	// with a service over HTTP, which is then the only tier: a chunk the
	// service does not give is an error, the version's root comes from
	// the service, and there is no hedging (and no LocalDir). The client
	// does not close it.
	Store store.Store
	// DB is the database's name in Store; "" means the store's root is
	// the database (a copied Dolt file:// remote). The cache service only
	// serves named databases, so DB "" cannot be used with Service.
	DB string
	// Service is the cache service's address: "http://host:port" or
	// "grpc://host:port", or over TLS "https://host:port" or
	// "grpcs://host:port". "" means no service.
	Service string
	// MemBytes bounds the memory tier, in bytes of chunk data (plus a
	// small per-chunk overhead). 0 means DefaultMemBytes; negative
	// disables the memory tier.
	MemBytes int64
	// ServiceTimeout is how long the client waits for the service's next
	// answer before it also asks the store for the chunks still missing
	// (a hedge; whichever correct answer arrives first wins). For a batch
	// the clock restarts with every chunk the service sends, so a service
	// that streams steadily is not hedged. 0 means DefaultServiceTimeout;
	// negative means never hedge (a service error or not-found still
	// falls back to the store).
	ServiceTimeout time.Duration
	// Gap merges the records of a batch that are at most this many bytes
	// apart in a table file into one ranged read. 0 means DefaultGap; 1
	// merges (nearly) only adjacent records.
	Gap uint64
	// MaxRead caps one merged read. 0 means DefaultMaxRead.
	MaxRead uint64
	// Concurrency is how many ranged reads one batch makes at once (and
	// how many table-file indexes are opened at once). 0 means
	// DefaultConcurrency.
	Concurrency int
	// IndexTail is how many bytes of a table file's end the first read
	// of its index fetches. 0 means DefaultIndexTail.
	IndexTail int
	// FreshRoot asks the cache service for a strictly fresh root: it
	// checks the store's manifest before it answers (one HEAD when it has
	// not changed). By default the service answers a root at most its
	// --manifest-ttl old, with no store round trip.
	FreshRoot bool
	// LocalDir is the cache directory (--cache-dir) of a cache service on
	// this host. "" means the client finds out (an HTTP service says
	// where its directory is, and the client checks the token the service
	// wrote there: a client on the service's host, or sharing its
	// directory, reads it, any other reads through the API); NoLocalDir
	// means never; a directory given must be the service's, or Open fails
	// saying why. Table files the service has verified and kept there are
	// read directly, in the reading goroutine, skipping the service's HTTP
	// or gRPC round trip. The service hashed every chunk of those files
	// against its address before keeping them (the directory's layout
	// marker says so, see api.CacheLayout), so the client checks each
	// record's CRC-32C, not its hash; without the marker it hashes too. A
	// record that fails is read from the store. Files the service has not
	// downloaded are read through the service as usual. The files are
	// found through the manifest, so without a Store only the service's
	// page images (OpenImage) are read from the directory.
	LocalDir string
	// Token is a bearer token for a service started with --auth-tokens,
	// sent as "Authorization: Bearer TOKEN" (an HTTP header, or gRPC
	// metadata). "" sends none. The client never logs it.
	Token string
	// CAFile is a PEM file of the certificate authorities that sign the
	// service's certificate, for a service started with --tls-cert
	// ("https://" or "grpcs://" addresses). "" means the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's own certificate and key (PEM),
	// for a service that asks for one (--tls-client-ca). Both or neither.
	CertFile, KeyFile string
	// NoRouting sends every read to Service. By default, when Service is
	// a node of a cluster (package cluster; HTTP only), each read goes to
	// the node that owns the chunk's table file, by the placement the
	// nodes use, and to the others in its order when that node fails:
	// the client learns the members and the database's files from
	// Service in the background, and asks Service until it has.
	NoRouting bool
	// SpinWait is how long a read of the cache service's answer (plain
	// HTTP, on the caller's thread) polls for it before it blocks: on a
	// virtual machine a blocked read's wake-up costs about as much as a
	// page request itself (package internal/spin). 0 means 200 µs; a
	// negative value never polls. CHUNKD_SPIN in the environment (a
	// duration, as chunkd serve's --spin; "0" never polls) overrides it,
	// for A/B measurements (a value that is not a duration is ignored
	// here, refused by chunkd serve). A read polls only while no other
	// read of this client is polling, stops when a yield of its CPU
	// ran another thread, never polls past its deadline or over 10 ms, and
	// polling pauses after answers that did not come in time.
	SpinWait time.Duration
	// Logger gets warnings (a service that sent a wrong chunk, backing off
	// from the service) and debug messages. nil means slog.Default().
	Logger *slog.Logger
}

// Errors of the package (wrapped; test with errors.Is).
var (
	// ErrNotFound: no tier has the chunk. Errors wrapping it are
	// *MissingError values naming the addresses.
	ErrNotFound = errors.New("chunk not found")
	// ErrCorrupt: stored bytes that do not decode, or decode to bytes that
	// do not hash to the chunk's address. Errors wrapping it are
	// *ChunkError values naming the address, the tier and the source.
	ErrCorrupt = errors.New("corrupt chunk")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client closed")
	// ErrNoDatabase: the cache service does not know the database (a
	// client without a store asks it for the root).
	ErrNoDatabase = errors.New("no such database")
)

// Tier names used in errors.
const (
	// TierService is the cache service.
	TierService = "service"
	// TierStore is the object store.
	TierStore = "store"
)

// ChunkError is a failure to read one chunk from one tier: a corrupt or
// mismatched chunk, or a failed read.
type ChunkError struct {
	// Addr is the chunk's address.
	Addr addr.Addr
	// Tier is TierService or TierStore.
	Tier string
	// From names the source: the service's address, or the table file's
	// object key.
	From string
	// Err is the cause; it wraps ErrCorrupt when the bytes were wrong.
	Err error
}

// Error implements error.
func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %s from %s %s: %v", e.Addr, e.Tier, e.From, e.Err)
}

// Unwrap returns the cause.
func (e *ChunkError) Unwrap() error { return e.Err }

// MissingError lists chunks that no tier has.
type MissingError struct {
	// DB is the database's name.
	DB string
	// Addrs are the missing addresses, in the order they were asked for.
	Addrs []addr.Addr
}

// Error names the first missing address and how many more there are.
func (e *MissingError) Error() string {
	var b strings.Builder
	if len(e.Addrs) == 0 {
		b.WriteString("chunks not found")
	} else {
		fmt.Fprintf(&b, "chunk %s", e.Addrs[0])
		if len(e.Addrs) > 1 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Addrs)-1)
		}
		b.WriteString(" not found")
	}
	if e.DB == "" {
		b.WriteString(" in the database at the store root")
	} else {
		fmt.Fprintf(&b, " in database %q", e.DB)
	}
	return b.String()
}

// Unwrap returns ErrNotFound.
func (e *MissingError) Unwrap() error { return ErrNotFound }

// Client reads the chunks of one database. Its methods are safe for
// concurrent use.
type Client struct {
	opts Options
	log  *slog.Logger

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	mem *otter.Cache[addr.Addr, []byte] // nil when disabled
	svc service                         // nil without a service
	st  *fileTier

	backoff backoff
	svcErr  atomic.Pointer[error] // the service's last failure; nil once it answers again
	ctr     counters
	// hedged is Options.Store as the client reads it; hedgeBase its
	// counts at the last ResetStats.
	hedged    *store.Hedged
	hedgeBase atomic.Pointer[store.HedgeStats]

	closeOnce sync.Once
	closeErr  error

	localMu sync.Mutex
	locals  []*os.File // local copies opened (Options.LocalDir), closed by Close
}

func (c *Client) addLocal(f *os.File) {
	c.localMu.Lock()
	c.locals = append(c.locals, f)
	c.localMu.Unlock()
}

// Open returns a client for database o.DB in o.Store. Without a service it
// loads the manifest and opens every table file's index before returning,
// so a missing database is an error here. With a service it starts that
// load in the background and returns at once: reads the service answers
// need no store, and the first read that does waits for the load.
func Open(ctx context.Context, o Options) (*Client, error) {
	switch {
	case o.Store == nil && o.Service == "":
		return nil, errors.New("client: no store and no service")
	case o.Store == nil:
		o.ServiceTimeout = -1 // nothing to hedge with
	}
	if o.MemBytes == 0 {
		o.MemBytes = DefaultMemBytes
	}
	if o.ServiceTimeout == 0 {
		o.ServiceTimeout = DefaultServiceTimeout
	}
	if o.Gap == 0 {
		o.Gap = DefaultGap
	}
	if o.MaxRead == 0 {
		o.MaxRead = DefaultMaxRead
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.IndexTail <= 0 {
		o.IndexTail = DefaultIndexTail
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var mdb *manifest.DB // nil without a store
	var hedged *store.Hedged
	if o.Store != nil {
		hedged = store.Hedge(o.Store, store.HedgeOptions{})
		o.Store = hedged
		var err error
		if mdb, err = manifest.Open(ctx, o.Store, o.DB); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	var err error
	c := &Client{opts: o, log: o.Logger, backoff: backoff{min: minBackoff, max: maxBackoff}, hedged: hedged}
	c.hedgeBase.Store(&store.HedgeStats{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if o.MemBytes > 0 {
		c.mem, err = chunkmem.New(o.MemBytes)
		if err != nil {
			c.cancel()
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	if o.Service != "" {
		if o.DB == "" {
			c.Close()
			return nil, errors.New("client: the cache service serves named databases only, and DB is \"\" (the store root)")
		}
		sa := serviceAuth{token: o.Token, caFile: o.CAFile, certFile: o.CertFile, keyFile: o.KeyFile}
		c.svc, err = newService(o.Service, o.DB, o.Concurrency, sa, spinPolicy(o.SpinWait))
		if err != nil {
			c.Close()
			return nil, err
		}
		if hs, ok := c.svc.(*httpService); ok && !o.NoRouting {
			c.svc = newRingService(hs, o.DB, sa, spinPolicy(o.SpinWait), o.Concurrency, c.log.Debug)
		}
	}
	if err := c.findLocalDir(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.st = &fileTier{opts: &c.opts, mdb: mdb, svc: c.svc, ctr: &c.ctr, log: c.log, ctx: c.ctx, keep: c.addLocal, rootReady: make(chan struct{})}
	switch {
	case mdb == nil:
		// The service is the only tier; the root is asked of it when
		// first wanted.
	case c.svc == nil:
		if _, err := c.st.current(ctx); err != nil {
			c.Close()
			return nil, err
		}
	default:
		// The root comes from the service, and so do the chunks: the
		// store is read (its manifest first) only when the service fails
		// or is slow, or, with LocalDir, at the first chunk read, to find
		// the service's files on this host (localTables).
	}
	return c, nil
}

// DB returns the database's name.
func (c *Client) DB() string { return c.opts.DB }

// Root returns the root address of the database version the client
// reads (from its manifest, loaded at Open or by the last Refresh).
func (c *Client) Root(ctx context.Context) (addr.Addr, error) {
	return c.st.root(ctx)
}

// Refresh reads the database's manifest again and opens the indexes of
// table files it has not seen, so that chunks of a newer version of the
// database become readable. A version is immutable, so the client never
// does this on its own. The memory tier stays valid: chunks are named by
// their contents.
func (c *Client) Refresh(ctx context.Context) error {
	if err := c.ctx.Err(); err != nil {
		return ErrClosed
	}
	return c.st.refresh(ctx)
}

// Get returns chunk a: from memory, else from the service, else from the
// store. The returned bytes are shared with the memory tier and must not
// be modified. A chunk no tier has is an error wrapping ErrNotFound; a
// chunk whose stored bytes are wrong is an error wrapping ErrCorrupt that
// names the address and where it came from.
func (c *Client) Get(ctx context.Context, a addr.Addr) ([]byte, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.ctr.gets.Add(1)
	if c.mem != nil {
		start := time.Now()
		c.ctr.memRequests.Add(1)
		data, ok := c.mem.GetIfPresent(a)
		c.ctr.memTime.Add(int64(time.Since(start)))
		if ok {
			c.ctr.memChunks.Add(1)
			c.ctr.memBytes.Add(int64(len(data)))
			return data, nil
		}
	}
	res, err := c.fetch(ctx, []addr.Addr{a})
	if err != nil {
		return nil, err
	}
	r := res[0]
	switch {
	case r.ok:
		return r.data, nil
	case errors.Is(r.err, ErrNotFound):
		c.ctr.notFound.Add(1)
		return nil, &MissingError{DB: c.opts.DB, Addrs: []addr.Addr{a}}
	}
	return nil, r.err
}

// GetMany reads the chunks at addrs and calls fn(i, data) for each
// position i whose chunk it got, in ascending i; an address that appears
// several times is read once and handed to fn for each position. Chunks
// missing from memory are asked for in batches: from the service (one
// request per 4096 addresses), and from the store with nearby records
// merged into single reads, up to Options.Concurrency at once.
//
// If some chunks could not be read, GetMany returns an error after the
// calls: a *MissingError (wrapping ErrNotFound) naming every address no
// tier has when that is the only problem, and otherwise the first other
// failure (say, one wrapping ErrCorrupt). Callers that need every chunk,
// like SQLite's page reads, just check the error. An error from fn stops
// the calls and is returned as is. data is shared with the memory tier
// and must not be modified.
func (c *Client) GetMany(ctx context.Context, addrs []addr.Addr, fn func(i int, data []byte) error) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.ctr.batches.Add(1)
	// Each distinct address once, in order of first appearance.
	pos := make([]int, len(addrs))
	index := make(map[addr.Addr]int, len(addrs))
	var want []addr.Addr
	for i, a := range addrs {
		k, ok := index[a]
		if !ok {
			k = len(want)
			index[a] = k
			want = append(want, a)
		}
		pos[i] = k
	}
	res := make([]result, len(want))
	var miss []int
	if c.mem != nil {
		start := time.Now()
		var hits, bytes int64
		for k, a := range want {
			if data, ok := c.mem.GetIfPresent(a); ok {
				res[k] = result{ok: true, data: data}
				hits++
				bytes += int64(len(data))
			} else {
				miss = append(miss, k)
			}
		}
		c.ctr.memTime.Add(int64(time.Since(start)))
		c.ctr.memRequests.Add(int64(len(want)))
		c.ctr.memChunks.Add(hits)
		c.ctr.memBytes.Add(bytes)
	} else {
		miss = make([]int, len(want))
		for k := range miss {
			miss[k] = k
		}
	}
	if len(miss) > 0 {
		as := make([]addr.Addr, len(miss))
		for j, k := range miss {
			as[j] = want[k]
		}
		got, err := c.fetch(ctx, as)
		if err != nil {
			return err
		}
		for j, k := range miss {
			res[k] = got[j]
		}
	}
	var missing []addr.Addr
	var failed error
	for k, r := range res {
		switch {
		case r.ok:
		case errors.Is(r.err, ErrNotFound):
			missing = append(missing, want[k])
		case failed == nil:
			failed = r.err
		}
	}
	for i, k := range pos {
		if res[k].ok {
			if err := fn(i, res[k].data); err != nil {
				return err
			}
		}
	}
	if failed != nil {
		return failed
	}
	if len(missing) > 0 {
		c.ctr.notFound.Add(int64(len(missing)))
		return &MissingError{DB: c.opts.DB, Addrs: missing}
	}
	return nil
}

// Close stops background work and releases the service connections. It
// does not close Options.Store. Reads after Close fail with ErrClosed.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		if c.svc != nil {
			c.closeErr = c.svc.close()
		}
		if c.mem != nil {
			c.mem.StopAllGoroutines()
		}
		c.localMu.Lock()
		for _, f := range c.locals {
			f.Close()
		}
		c.localMu.Unlock()
	})
	return c.closeErr
}

// spinEnv overrides Options.SpinWait: a duration, "0" for never.
const spinEnv = "CHUNKD_SPIN"

// spinPolicy is a client's polling policy for Options.SpinWait d.
func spinPolicy(d time.Duration) *spin.Policy {
	if v, err := time.ParseDuration(os.Getenv(spinEnv)); err == nil {
		d = v
		if v == 0 {
			d = -1
		}
	}
	return &spin.Policy{Max: d}
}
