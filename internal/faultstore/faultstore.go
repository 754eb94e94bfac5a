// Package faultstore is a store for tests that can be broken on demand:
// every call failing (unreachable, denied), hanging until its context
// ends, or whole-object streams held at a byte offset.
package faultstore

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"

	"github.com/chunkd/chunkd/internal/testio"
	"github.com/chunkd/chunkd/store"
)

// Store wraps a store so tests can break it: fail every call, hold
// whole-object streams at a byte offset until released, or fail them.
type Store struct {
	store.Store
	Down   atomic.Bool  // every call fails: unreachable
	Deny   atomic.Bool  // every call fails: access denied
	Hang   atomic.Bool  // every call waits for its context to end
	HoldAt atomic.Int64 // >0: Open streams stop after this many bytes, held by Gate
	Gate   testio.Gate
	Opens  atomic.Int64 // whole-object streams opened, manifests aside
}

// fault returns the injected failure for a call, if any.
func (f *Store) fault(ctx context.Context) error {
	switch {
	case f.Down.Load():
		return store.ErrUnreachable
	case f.Deny.Load():
		return fmt.Errorf("%w (injected)", store.ErrAccessDenied)
	case f.Hang.Load():
		<-ctx.Done()
		return fmt.Errorf("%w: %w", store.ErrUnreachable, ctx.Err())
	}
	return nil
}

func (f *Store) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := f.fault(ctx); err != nil {
		return 0, err
	}
	return f.Store.ReadAt(ctx, key, p, off)
}

func (f *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *Store) Head(ctx context.Context, key string) (store.Info, error) {
	if err := f.fault(ctx); err != nil {
		return store.Info{}, err
	}
	return f.Store.Head(ctx, key)
}

func (f *Store) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if err := f.fault(ctx); err != nil {
		return nil, store.Info{}, err
	}
	if strings.HasPrefix(path.Base(key), "manifest") {
		return f.Store.Open(ctx, key)
	}
	f.Opens.Add(1)
	rc, info, err := f.Store.Open(ctx, key)
	if err != nil || f.HoldAt.Load() == 0 {
		return rc, info, err
	}
	return f.Gate.Hold(ctx, rc, f.HoldAt.Load()), info, nil
}

// Unwrap returns the store wrapped (store.Exists asks it).
func (f *Store) Unwrap() store.Store { return f.Store }
