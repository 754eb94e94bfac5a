// Package store defines the object-store interface chunkd reads table files
// and manifests through, and the errors every backend returns.
//
// Backends live in sub-packages named for their scheme (store/folder,
// store/s3) and register themselves with Register from an init function;
// Open picks one by URL. A program imports the backends it wants for their
// side effects.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors every backend returns (wrapped, so test with errors.Is).
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("no such object")
	// ErrUnreachable: the store could not be reached or did not answer in time.
	ErrUnreachable = errors.New("store unreachable")
	// ErrAccessDenied: the store refused the credentials or the operation.
	ErrAccessDenied = errors.New("access denied")
	// ErrPrecondition: a conditional put lost, because the object changed
	// (or exists, when it was required not to).
	ErrPrecondition = errors.New("precondition failed: object changed")
	// ErrBadKey: the key is empty, absolute, or climbs out of the store.
	ErrBadKey = errors.New("bad object key")
)

// Info describes one object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
	// Version is an opaque token that changes whenever the object does (an
	// ETag for S3, a content hash for a folder). PutIf compares it.
	Version string
}

// Store is an object store: a flat namespace of immutable-by-convention
// objects named by slash-separated keys.
//
// Every method is safe for concurrent use. Keys are relative, slash
// separated, and never contain "..", a leading "/" or a backslash; a method
// given such a key returns an error wrapping ErrBadKey.
type Store interface {
	// ReadAt reads len(p) bytes of the object at offset off. It returns
	// io.ErrUnexpectedEOF (wrapped) if the object ends first, and an error
	// wrapping ErrNotFound if the object does not exist.
	ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error)
	// Get reads a whole object.
	Get(ctx context.Context, key string) ([]byte, error)
	// Open streams a whole object; the caller closes the reader.
	Open(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Put writes an object atomically: readers see the old object or the
	// whole new one, never a part.
	Put(ctx context.Context, key string, data []byte) error
	// Head returns an object's size, time and version.
	Head(ctx context.Context, key string) (Info, error)
	// List returns every object whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// PutIf writes an object only if its current version equals ifVersion,
	// or, when ifVersion is "", only if it does not exist yet. It returns
	// the new version, or an error wrapping ErrPrecondition if another
	// writer got there first. Manifests are replaced this way.
	PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error)
	// String names the store, as a URL, for logs and errors.
	String() string
	// Close releases resources.
	Close() error
}

// Opener makes a store from a parsed URL.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

// OpenerOf adapts a backend's Open, which returns its own type, to an
// Opener: a failed open gives a nil Store, not one holding a nil pointer.
func OpenerOf[S Store](open func(ctx context.Context, u *url.URL) (S, error)) Opener {
	return func(ctx context.Context, u *url.URL) (Store, error) {
		s, err := open(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

var (
	mu      sync.Mutex
	openers = map[string]Opener{}
)

// Register makes a backend available to Open under a URL scheme.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Open opens a store by URL: "file:///path", a plain path (a local
// folder), or "s3://bucket/prefix?endpoint=...". Backends must be
// registered (imported) first.
//
// Two query parameters are handled here for every scheme and removed
// before the backend sees the URL: latency=30ms delays every request by
// that round trip, and bandwidth=100MB (bytes per second, see
// ParseBandwidth) adds the time a payload takes to move; see WithLatency.
func Open(ctx context.Context, rawURL string) (Store, error) {
	if rawURL == "" {
		return nil, errors.New("open store: empty URL")
	}
	u, err := url.Parse(rawURL)
	switch {
	case err == nil && u.Scheme == "" && u.RawQuery != "" && u.Fragment == "":
		// A plain path with parameters ("/data/store?latency=30ms"): the
		// parameters are parameters, not part of a folder's name.
		u = &url.URL{Scheme: "file", Path: u.Path, RawQuery: u.RawQuery}
	case err != nil || u.Scheme == "" || len(u.Scheme) == 1: // "C:" style or a plain path
		u = &url.URL{Scheme: "file", Path: rawURL}
	}
	mu.Lock()
	open, ok := openers[u.Scheme]
	var known []string
	for s := range openers {
		known = append(known, s)
	}
	mu.Unlock()
	if !ok {
		sort.Strings(known)
		return nil, fmt.Errorf("open store %q: unknown scheme %q (known: %s)", Redact(rawURL), u.Scheme, strings.Join(known, ", "))
	}
	rtt, bw, slow, err := stripLatencyParams(u)
	if err != nil {
		return nil, fmt.Errorf("open store %q: %w", Redact(rawURL), err)
	}
	s, err := open(ctx, u)
	if err != nil || !slow {
		return s, err
	}
	return WithLatency(s, rtt, bw), nil
}

// secretParams are the query parameters that hold secrets.
var secretParams = []string{"secret_key", "session_token", "password", "token"}

// Exists reports whether s exists at all, for stores that can tell: a
// folder store whose directory is missing (no read tells it from an empty
// store) does not. Stores that cannot tell, and wrappers of them, exist.
func Exists(s Store) bool {
	for {
		switch x := s.(type) {
		case interface{ Exists() bool }:
			return x.Exists()
		case interface{ Unwrap() Store }:
			s = x.Unwrap()
		default:
			return true
		}
	}
}

// Redact returns a store URL fit for logs: the password of its user
// information and the values of query parameters that hold secrets
// (secret_key, session_token, password, token) are replaced by "xxxxx".
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return rawURL
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			k, _, ok := strings.Cut(p, "=")
			if ok && slices.Contains(secretParams, k) {
				parts[i] = k + "=xxxxx"
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	return u.Redacted()
}

// Secrets names the secrets a store URL holds: "password" for one in its
// user information, and each secret query parameter that has a value.
// Redact hides the same ones.
func Secrets(rawURL string) []string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil
	}
	var names []string
	if _, ok := u.User.Password(); ok {
		names = append(names, "password")
	}
	q := u.Query()
	for _, k := range secretParams {
		if q.Get(k) != "" {
			names = append(names, k)
		}
	}
	return names
}

// CheckKey returns an error wrapping ErrBadKey if key is not a clean relative key.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrBadKey)
	case strings.HasPrefix(key, "/"), strings.ContainsRune(key, '\\'), strings.ContainsRune(key, 0):
		return fmt.Errorf("%w %q", ErrBadKey, key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%w %q", ErrBadKey, key)
		}
	}
	return nil
}

// ReaderAt adapts one object of a store to io.ReaderAt, for table-file
// readers. ctx bounds every read made through it.
func ReaderAt(ctx context.Context, s Store, key string) io.ReaderAt {
	return readerAt{ctx, s, key}
}

type readerAt struct {
	ctx context.Context
	s   Store
	key string
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.s.ReadAt(r.ctx, r.key, p, off)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return n, io.EOF
	}
	return n, err
}
