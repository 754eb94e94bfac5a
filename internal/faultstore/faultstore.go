// Package faultstore is a store for tests that can be broken on demand:
// every call failing (unreachable, denied), hanging until its context
// ends, one read in N stalling, or streams held at a byte offset.
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
// streams at a byte offset until released, or fail them.
type Store struct {
	store.Store
	Down atomic.Bool // every call fails: unreachable
	Deny atomic.Bool // every call fails: access denied
	Hang atomic.Bool // every call waits for its context to end
	// StallEvery, when n > 0, makes every n-th read of a table file
	// (ReadAt, Open, OpenRange; manifests aside) wait for its context to
	// end, as a request a store never answers does.
	StallEvery atomic.Int64
	// HoldAt > 0 holds every stream (Open, OpenRange) of a table file at
	// that byte of the object until Gate opens: a range that starts at or
	// after it is held before its first byte.
	HoldAt atomic.Int64
	Gate   testio.Gate
	Opens  atomic.Int64 // streams opened (Open, OpenRange), manifests aside
	// Streamed counts the bytes streams of table files delivered.
	Streamed atomic.Int64
	Stalled  atomic.Int64 // reads StallEvery stalled

	reads atomic.Int64
}

// stall waits for ctx to end if this read is one StallEvery stalls.
func (f *Store) stall(ctx context.Context, key string) error {
	n := f.StallEvery.Load()
	if n <= 0 || isManifest(key) || f.reads.Add(1)%n != 0 {
		return nil
	}
	f.Stalled.Add(1)
	<-ctx.Done()
	return fmt.Errorf("%w: stalled (injected): %w", store.ErrUnreachable, ctx.Err())
}

func isManifest(key string) bool { return strings.HasPrefix(path.Base(key), "manifest") }

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
	if err := f.stall(ctx, key); err != nil {
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
	if isManifest(key) {
		return f.Store.Open(ctx, key)
	}
	if err := f.stall(ctx, key); err != nil {
		return nil, store.Info{}, err
	}
	f.Opens.Add(1)
	rc, info, err := f.Store.Open(ctx, key)
	if err != nil {
		return rc, info, err
	}
	return f.stream(ctx, rc, 0), info, nil
}

// OpenRange streams part of an object (store.RangeReader), held at
// HoldAt like Open's streams.
func (f *Store) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := f.fault(ctx); err != nil {
		return nil, err
	}
	if isManifest(key) {
		return store.OpenRange(ctx, f.Store, key, off, n)
	}
	if err := f.stall(ctx, key); err != nil {
		return nil, err
	}
	f.Opens.Add(1)
	rc, err := store.OpenRange(ctx, f.Store, key, off, n)
	if err != nil {
		return rc, err
	}
	return f.stream(ctx, rc, off), nil
}

// stream counts what rc, a stream from byte off, delivers, and holds it
// at HoldAt.
func (f *Store) stream(ctx context.Context, rc io.ReadCloser, off int64) io.ReadCloser {
	rc = counted{rc, &f.Streamed}
	if at := f.HoldAt.Load(); at > 0 {
		return f.Gate.Hold(ctx, rc, max(0, at-off))
	}
	return rc
}

type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c counted) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Unwrap returns the store wrapped (store.Exists asks it).
func (f *Store) Unwrap() store.Store { return f.Store }
