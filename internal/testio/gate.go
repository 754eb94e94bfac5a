// Package testio holds what tests use to control how a stream arrives: a
// Gate that holds streams part-way until the test lets them go on.
package testio

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// ErrInjected is what a held stream returns once its gate opens, when the
// gate was set to fail them.
var ErrInjected = errors.New("connection reset (injected)")

// Gate holds streams at a byte offset until it is opened. The zero Gate
// is closed and lets held streams go on when opened.
type Gate struct {
	once   sync.Once
	opened chan struct{}
	open   sync.Once
	fail   atomic.Bool
	held   atomic.Int64
}

func (g *Gate) ch() chan struct{} {
	g.once.Do(func() { g.opened = make(chan struct{}) })
	return g.opened
}

// Open lets every held stream go on, and any later one pass its hold
// point. It may be called more than once.
func (g *Gate) Open() { g.open.Do(func() { close(g.ch()) }) }

// FailOnOpen makes held streams fail with ErrInjected instead of going
// on, as a connection reset mid-stream would.
func (g *Gate) FailOnOpen() { g.fail.Store(true) }

// Held returns how many streams have reached their hold point.
func (g *Gate) Held() int64 { return g.held.Load() }

// Hold returns a stream that reads rc's first n bytes, then waits until
// the gate opens or ctx ends before it reads the rest.
func (g *Gate) Hold(ctx context.Context, rc io.ReadCloser, n int64) io.ReadCloser {
	return &held{rc: rc, left: n, g: g, ctx: ctx}
}

type held struct {
	rc   io.ReadCloser
	left int64 // bytes before the hold point; -1 once past it
	g    *Gate
	ctx  context.Context
}

func (h *held) Read(p []byte) (int, error) {
	if h.left == 0 {
		h.g.held.Add(1)
		select {
		case <-h.g.ch():
		case <-h.ctx.Done():
			return 0, h.ctx.Err()
		}
		if h.g.fail.Load() {
			return 0, ErrInjected
		}
		h.left = -1
	}
	if h.left > 0 && int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.rc.Read(p)
	if h.left > 0 {
		h.left -= int64(n)
	}
	return n, err
}

func (h *held) Close() error { return h.rc.Close() }
