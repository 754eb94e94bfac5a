//go:build chunkd_ext

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
	_ "github.com/chunkd/chunkd/store/folder" // file:// and plain paths
	_ "github.com/chunkd/chunkd/store/s3"     // s3://
)

// config is what a database URI says (file:DBNAME?vfs=chunkd&...): its
// parameters, or the environment variables named, for programs that
// cannot pass URI parameters.
type config struct {
	db      string        // the URI's path: the database's name in the store
	service string        // service= or CHUNKD_SERVICE: the cache service, http://host:port
	store   string        // store= or CHUNKD_STORE: the store URL (percent-encoded in the URI)
	at      sqlchunks.At  // at=: a version's root or a time; zero for the latest
	mem     int64         // mem=: the in-process memory tier (default 256MiB; 0 none)
	token   string        // token= or CHUNKD_TOKEN: the service's bearer token
	ca      string        // ca= or CHUNKD_CA: PEM file of the CAs that sign an https service's certificate (default: the system's)
	dir     string        // dir=: the service's cache directory ("" found by itself on the service's host; "none" never read)
	timeout time.Duration // timeout=: bounds the open, and each read (default 30s)
}

// Defaults of config.
const (
	defaultMem     = 256 << 20
	defaultTimeout = 30 * time.Second
)

// params lists the URI parameters chunkd reads; sqliteParams those SQLite
// itself reads, which are let through.
var (
	params       = []string{"service", "store", "at", "mem", "token", "ca", "dir", "timeout"}
	sqliteParams = []string{"vfs", "mode", "cache", "immutable", "nolock", "psow", "modeof"}
)

// openError is an error with the SQLite result code the open fails with.
type openError struct {
	code int
	err  error
}

func (e *openError) Error() string { return e.err.Error() }
func (e *openError) Unwrap() error { return e.err }

// deferredError is the error of an open whose URI holds a secret (a
// token, or a store URL's key): such an open does not fail, since a host
// program may print the URI of a failed open (the sqlite3 shell does,
// token and all). The error is logged instead, and the database's reads
// fail with it (SQLite's "disk I/O error"); chunkd_last_error() gives it.
type deferredError struct{ err error }

func (e *deferredError) Error() string { return e.err.Error() }
func (e *deferredError) Unwrap() error { return e.err }

// secrets returns the secrets a URI's parameters hold: its token, and
// the password and keys of its store URL.
func secrets(q url.Values) []string {
	var out []string
	if v := q.Get("token"); v != "" {
		out = append(out, v)
	}
	if s := q.Get("store"); len(store.Secrets(s)) > 0 {
		u, _ := url.Parse(s)
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
		}
		for _, name := range store.Secrets(s) {
			if v := u.Query().Get(name); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// scrubbed is err with every secret in its text replaced by xxxxx, the
// result code kept.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

func scrub(err error, secrets []string) error {
	msg := err.Error()
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg, err}
}

// cantOpen and ioErr wrap an open's error with its result code.
func cantOpen(format string, args ...any) error {
	return &openError{sqliteCantOpen, fmt.Errorf("chunkd: "+format, args...)}
}

func ioErr(format string, args ...any) error {
	return &openError{sqliteIOErr, fmt.Errorf("chunkd: "+format, args...)}
}

// parseConfig reads a database's URI: its name and parameters, then the
// environment for what the parameters leave out.
func parseConfig(name string, q url.Values) (config, error) {
	c := config{db: strings.TrimPrefix(name, "/"), mem: defaultMem, timeout: defaultTimeout}
	for k, vs := range q {
		if !slices.Contains(params, k) && !slices.Contains(sqliteParams, k) {
			return c, cantOpen("unknown URI parameter %q (chunkd reads %s)", k, strings.Join(params, ", "))
		}
		if len(vs) > 1 && slices.Contains(params, k) {
			return c, cantOpen("URI parameter %q given %d times", k, len(vs))
		}
	}
	if err := manifest.ValidateName(c.db); err != nil {
		return c, cantOpen("%v", err)
	}
	c.service = param(q, "service", "CHUNKD_SERVICE")
	c.store = param(q, "store", "CHUNKD_STORE")
	c.token = param(q, "token", "CHUNKD_TOKEN")
	c.ca = param(q, "ca", "CHUNKD_CA")
	c.dir = q.Get("dir")
	if c.service == "" && c.store == "" {
		return c, cantOpen("database %q: no service= or store= in its URI, and neither CHUNKD_SERVICE nor CHUNKD_STORE is set", c.db)
	}
	if v := q.Get("at"); v != "" {
		at, err := sqlchunks.ParseAt(v)
		if err != nil {
			return c, cantOpen("URI parameter at=%s: %v", v, err)
		}
		c.at = at
	}
	if v, ok := q["mem"]; ok {
		n, err := humanize.ParseBytes(v[0])
		if err != nil || n > 1<<50 {
			return c, cantOpen("URI parameter mem=%s: want a size such as 256MiB (0: no memory tier)", v[0])
		}
		c.mem = int64(n)
	}
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, cantOpen("URI parameter timeout=%s: want a duration such as 30s", v)
		}
		c.timeout = d
	}
	return c, nil
}

// param returns URI parameter k, or else environment variable env.
func param(q url.Values, k, env string) string {
	if v := q.Get(k); v != "" {
		return v
	}
	return os.Getenv(env)
}

// source is one open database version: what the SQL functions report on.
type source struct {
	c     *client.Client
	root  addr.Addr
	pages *sqlchunks.Pages
	reads *reads
}

// reads is what the extension knows of an open database's reads: the last
// that failed SQLite's, for chunkd_last_error(), and whether they fail
// now.
type reads struct {
	log     *slog.Logger
	db      string
	last    atomic.Pointer[error]
	failing atomic.Bool // a read failed, and none has worked since
}

// failed is sqlitevfs.Options.ReadFailed: it keeps err, and logs it when
// reads that worked begin to fail, once until they work again.
func (r *reads) failed(err error) {
	r.last.Store(&err)
	if r.failing.CompareAndSwap(false, true) {
		r.log.Error(fmt.Sprintf("chunkd: a read of database %q failed, and queries fail with \"disk I/O error\" until reads work again; SELECT chunkd_last_error() gives the latest error", r.db), "err", err)
	}
}

// done is sqlchunks.Source.ReadDone: a read that worked ends a run of
// failures (the next failure is logged again).
func (r *reads) done(err error) {
	if err == nil && r.failing.Load() {
		r.failing.Store(false)
	}
}

// lastError returns the error of the last read that failed, or nil.
func (r *reads) lastError() error {
	if p := r.last.Load(); p != nil {
		return *p
	}
	return nil
}

// open is the VFS's Opener: it opens a client for the database the URI
// names, and the pages of its version. The whole open is bounded by the
// timeout; so is each later read (timedReader). An error never holds a
// secret of the URI; the open of a URI that holds one fails only its
// reads (deferredError).
func open(name string, q url.Values) (*sqlitevfs.Image, error) {
	img, err := openURI(name, q)
	if err == nil {
		return img, nil
	}
	s := secrets(q)
	err = scrub(err, s)
	if len(s) > 0 {
		err = &deferredError{err}
	}
	return nil, err
}

func openURI(name string, q url.Values) (*sqlitevfs.Image, error) {
	cfg, err := parseConfig(name, q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	var st store.Store
	if cfg.store != "" {
		if st, err = store.Open(ctx, cfg.store); err != nil {
			return nil, cantOpen("store=: %v", err)
		}
	}
	closeStore := func() {
		if st != nil {
			st.Close()
		}
	}
	log := logger()
	rs := &reads{log: log, db: cfg.db}
	// As chunkd sql opens a version (sqlchunks.Open): through a service,
	// its open set; on the service's host, its page image.
	v, err := sqlchunks.Open(ctx, sqlchunks.Source{Store: st, DB: cfg.db, Service: cfg.service, ServiceDir: cfg.dir, At: cfg.at,
		MemBytes: memOption(cfg.mem), Token: cfg.token, CAFile: cfg.ca, ReadTimeout: cfg.timeout, ReadDone: rs.done, Logger: log})
	switch {
	case errors.Is(err, sqlchunks.ErrNotRoot), errors.Is(err, client.ErrNotFound), errors.Is(err, sqlchunks.ErrNoVersion), errors.Is(err, sqlchunks.ErrCollected):
		closeStore()
		return nil, cantOpen("%v", err) // no such version of a chunkd SQLite database
	case errors.Is(err, sqlchunks.ErrBadMap), errors.Is(err, client.ErrCorrupt):
		closeStore()
		return nil, ioErr("%v", err) // its page map did not read
	case err != nil:
		closeStore()
		return nil, cantOpen("%v", err)
	}
	src := &source{c: v.Client, root: v.Root, pages: v.Pages, reads: rs}
	return &sqlitevfs.Image{Pages: v.Pages, Options: &sqlitevfs.Options{ReadFailed: rs.failed}, Value: src, Close: func() error {
		err := v.Close()
		closeStore()
		return err
	}}, nil
}

// memOption turns mem= into client.Options.MemBytes (0: none).
func memOption(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// logger logs on stderr (the host's output is not ours to write to) at
// the level CHUNKD_LOG_LEVEL names (debug, info, warn, error or off),
// error by default: a line when reads begin to fail, or an open does not
// fail with its error (deferredError). The client's warnings are at warn.
func logger() *slog.Logger {
	name := os.Getenv("CHUNKD_LOG_LEVEL")
	if name == "off" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	level := slog.LevelError
	if name != "" && level.UnmarshalText([]byte(name)) != nil {
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// tierJSON is one tier in chunkd_stats().
type tierJSON struct {
	Chunks   int64 `json:"chunks"`
	Bytes    int64 `json:"bytes"`
	Requests int64 `json:"requests"`
}

// statsJSON is chunkd_stats(): the pages SQLite read (its page caches'
// misses) and the client's counters per tier, since the database opened,
// over every connection to it.
func (s *source) statsJSON(pagesRead int64) (string, error) {
	st := s.c.Stats()
	tier := func(t client.TierStats) tierJSON { return tierJSON{t.Chunks, t.Bytes, t.Requests} }
	b, err := json.Marshal(struct {
		DB        string   `json:"db"`
		Root      string   `json:"root"`
		Pages     int64    `json:"pages"`
		PageSize  int      `json:"page_size"`
		PagesRead int64    `json:"pages_read"`
		Memory    tierJSON `json:"memory"`
		Service   tierJSON `json:"service"`
		Store     tierJSON `json:"store"`
		NotFound  int64    `json:"not_found"`
		Hedged    int64    `json:"hedged"`
		StoreRead int64    `json:"store_read_bytes"`
		// The service's cache directory, read on its host ("" through
		// its API only): pages from its page image, chunks from its
		// verified files (counted in store too).
		ServiceDir  string `json:"service_dir"`
		ImageReads  int64  `json:"image_reads"`
		ImageFills  int64  `json:"image_fills"`
		LocalChunks int64  `json:"local_chunks"`
	}{s.c.DB(), s.root.String(), s.pages.PageCount(), s.pages.PageSize(), pagesRead,
		tier(st.Memory), tier(st.Service), tier(st.Store), st.NotFound, st.Hedged, st.StoreReadBytes,
		s.c.LocalDir(), st.ImageReads, st.ImageFills, st.LocalChunks})
	return string(b), err
}
