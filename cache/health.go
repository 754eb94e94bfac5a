package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/chunkd/chunkd/store"
)

// storeHealth remembers whether the store answered the last time the
// service asked, for /readyz and the log.
type storeHealth struct {
	mu      sync.Mutex
	failing bool
	kind    Kind // KindStoreUnreachable or KindStoreDenied while failing
	since   time.Time
	err     error
}

// observe records the outcome of a store request; it reports whether the
// store's state changed, so the caller logs the change once.
func (h *storeHealth) observe(err error) (changed bool) {
	failing, k := false, KindInternal
	if err != nil {
		switch k = KindOf(err); k {
		case KindStoreUnreachable, KindStoreDenied:
			failing = true
		case KindCanceled:
			return false // the caller gave up: no news of the store
		default:
			k = KindInternal // an answer, if not the one hoped for
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	changed = h.failing != failing || h.kind != k
	if changed {
		h.since = time.Now()
	}
	h.failing, h.kind, h.err = failing, k, err
	return changed
}

func (h *storeHealth) note() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.failing {
		return ""
	}
	return fmt.Sprintf("%s since %s (%v): serving what is cached on disk", h.kind, h.since.UTC().Format(time.RFC3339), h.err)
}

// watchedStore is the store as the service uses it: every read's outcome
// feeds storeHealth, whose changes are logged once each.
type watchedStore struct {
	store.Store
	h   *storeHealth
	log *slog.Logger
}

// vanished turns "no such object" into "unreachable" when the store
// itself is gone (a folder store whose directory was moved away): a
// client must never read a store it cannot see as one that lacks the
// database. Stores that cannot tell are taken to exist.
func (w watchedStore) vanished(err error) error {
	if errors.Is(err, store.ErrNotFound) && !store.Exists(w.Store) {
		return fmt.Errorf("%w: the store %s does not exist (was it moved or unmounted?): %v", store.ErrUnreachable, w.Store, err) // not %w: no longer "not found"
	}
	return err
}

func (w watchedStore) observe(err error) {
	if !w.h.observe(err) {
		return
	}
	if err != nil {
		w.log.Warn("the store is failing: serving what is cached on disk; reads of anything else fail until it answers", "kind", KindOf(err).String(), "err", err)
	} else {
		w.log.Info("the store answers again")
	}
}

func (w watchedStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, err := w.Store.ReadAt(ctx, key, p, off)
	err = w.vanished(err)
	w.observe(err)
	return n, err
}

func (w watchedStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := w.Store.Get(ctx, key)
	err = w.vanished(err)
	w.observe(err)
	return b, err
}

func (w watchedStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	rc, info, err := w.Store.Open(ctx, key)
	err = w.vanished(err)
	w.observe(err)
	return rc, info, err
}

func (w watchedStore) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := store.OpenRange(ctx, w.Store, key, off, n)
	err = w.vanished(err)
	w.observe(err)
	return rc, err
}

func (w watchedStore) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	n, size, err := store.ReadTail(ctx, w.Store, key, p)
	err = w.vanished(err)
	w.observe(err)
	return n, size, err
}

func (w watchedStore) Head(ctx context.Context, key string) (store.Info, error) {
	info, err := w.Store.Head(ctx, key)
	err = w.vanished(err)
	w.observe(err)
	return info, err
}

// rate is a moving average (weight 1/8) of a rate, in units a second.
type rate struct {
	mu sync.Mutex
	v  float64
}

func (r *rate) observe(v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.v == 0 {
		r.v = v
		return
	}
	r.v += (v - r.v) / 8
}

// get returns the average; 0 before anything was observed.
func (r *rate) get() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v
}
