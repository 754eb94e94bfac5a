package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/store"
)

// A node's own reads of a file it owns go to the store, and in a cold
// storm they come all at once: its download, the read-through of its own
// clients' misses while the download runs, and the peers' reads it
// answers (which follow the download). sharedReads makes them one read of
// the file: the first read of a table file is its index's tail and goes
// to the store alone; the next starts one stream of the whole object,
// kept in memory while it lasts, and every read of the file (the
// download's Open included) is answered from it as it arrives. A file
// larger than shareMax, or one more than sharedBudget would hold, is read
// as before.
const (
	shareMax     = 64 << 20
	sharedBudget = 256 << 20
	// shareReach is how far past what has arrived a read waits for the
	// stream rather than reading the store itself.
	shareReach = 16 << 20
	// shareLinger is how long a finished stream is kept for the reads
	// that race the download's commit.
	shareLinger = 5 * time.Second
	// shareStall is how long a read waits for a stream that brings
	// nothing before it reads the store itself.
	shareStall = 5 * time.Second
)

type sharedReads struct {
	s store.Store
	n *Node

	mu      sync.Mutex
	seen    map[string]bool          // keys read once (their index's tail)
	streams map[string]*sharedStream // in flight or lingering
	held    int64                    // bytes of the streams' buffers
}

// sharedStream is one whole-object read, kept in memory.
type sharedStream struct {
	key string

	mu      sync.Mutex
	cond    *sync.Cond
	size    int64 // known once the store answered (opened)
	opened  bool
	buf     []byte
	arrived int64
	err     error // set once the stream failed
	done    bool  // every byte arrived, or err
	last    time.Time
	// joined: a download (Open) read the stream, and counted its bytes
	// as the store's; else the stream counts them itself.
	joined atomic.Bool
}

func newSharedReads(s store.Store, n *Node) *sharedReads {
	return &sharedReads{s: s, n: n, seen: map[string]bool{}, streams: map[string]*sharedStream{}}
}

// stream returns the stream of key, starting one unless this is the
// file's first read and not first (an Open); nil when it is not shared.
func (r *sharedReads) stream(key string, open bool) *sharedStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.streams[key]; st != nil {
		return st
	}
	if !r.seen[key] && !open {
		r.seen[key] = true // the index's tail: read alone
		return nil
	}
	r.seen[key] = true
	st := &sharedStream{key: key, last: time.Now()}
	st.cond = sync.NewCond(&st.mu)
	r.streams[key] = st
	go r.fill(st)
	return st
}

// fill streams the object into st, then keeps it shareLinger.
func (r *sharedReads) fill(st *sharedStream) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-r.n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var held int64
	err := func() error {
		rc, info, err := r.s.Open(ctx, st.key)
		if err != nil {
			return err
		}
		defer rc.Close()
		r.mu.Lock()
		fits := info.Size > 0 && info.Size <= shareMax && r.held+info.Size <= sharedBudget
		if fits {
			r.held += info.Size
			held = info.Size
		}
		r.mu.Unlock()
		if !fits {
			return errNotShared
		}
		st.mu.Lock()
		st.size, st.buf, st.opened = info.Size, make([]byte, info.Size), true
		st.cond.Broadcast()
		st.mu.Unlock()
		var off int64
		for off < st.size {
			k, err := rc.Read(st.buf[off:min(off+1<<20, st.size)])
			if k > 0 {
				off += int64(k)
				st.mu.Lock()
				st.arrived, st.last = off, time.Now()
				st.cond.Broadcast()
				st.mu.Unlock()
			}
			if err == io.EOF && off < st.size {
				return fmt.Errorf("%s: %w after %d of %d bytes", st.key, io.ErrUnexpectedEOF, off, st.size)
			}
			if err != nil && err != io.EOF {
				return err
			}
		}
		return nil
	}()
	cancel()
	st.mu.Lock()
	st.err, st.done = err, true
	st.cond.Broadcast()
	st.mu.Unlock()
	if err == nil {
		time.Sleep(shareLinger)
	}
	r.mu.Lock()
	delete(r.streams, st.key)
	r.held -= held
	r.mu.Unlock()
	if !st.joined.Load() { // no download counted its bytes
		st.mu.Lock()
		r.n.m.streamBytes.Add(float64(st.arrived))
		st.mu.Unlock()
	}
}

var errNotShared = errors.New("not shared: too large for the shared reads' memory")

// readAt answers a read of [off, off+len(p)) from st, waiting for it;
// ok false sends the read to the store (out of reach, the stream failed
// or stalled).
func (st *sharedStream) readAt(ctx context.Context, p []byte, off int64) (n int, ok bool) {
	end := off + int64(len(p))
	st.mu.Lock()
	defer st.mu.Unlock()
	for st.arrived < end || !st.opened {
		if st.done || (st.opened && (end > st.size || end-st.arrived > shareReach)) || ctx.Err() != nil || time.Since(st.last) > shareStall {
			return 0, false
		}
		waitCond(st.cond, 10*time.Millisecond)
	}
	return copy(p, st.buf[off:end]), true
}

// open waits until the stream's object is open and returns its size, or
// ok false when it is not shared (the caller opens the store itself).
func (st *sharedStream) open(ctx context.Context) (size int64, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for !st.opened {
		if st.done || ctx.Err() != nil || time.Since(st.last) > shareStall {
			return 0, false
		}
		waitCond(st.cond, 10*time.Millisecond)
	}
	return st.size, true
}

// waitCond waits on c (its lock held) for a broadcast or d.
func waitCond(c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, c.Broadcast)
	c.Wait()
	t.Stop()
}

// streamReader reads a shared stream from off, to end if bounded (else
// to the object's end), as Open's and OpenRange's reader.
type streamReader struct {
	ctx     context.Context
	st      *sharedStream
	off     int64
	end     int64
	bounded bool
}

func (s *streamReader) Read(p []byte) (int, error) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.bounded && s.off >= s.end {
		return 0, io.EOF
	}
	if s.bounded && int64(len(p)) > s.end-s.off {
		p = p[:s.end-s.off]
	}
	for st.arrived <= s.off {
		if s.off >= st.size {
			return 0, io.EOF
		}
		if st.done {
			if st.err != nil {
				return 0, st.err
			}
			return 0, io.EOF
		}
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
		waitCond(st.cond, 50*time.Millisecond)
	}
	k := copy(p, st.buf[s.off:st.arrived])
	s.off += int64(k)
	return k, nil
}

func (s *streamReader) Close() error { return nil }
