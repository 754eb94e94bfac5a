package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/store"
)

// Store returns the store this node's cache reads through (cache.Config.
// Store): reads of table files another node owns go to that node, one hop;
// everything else (files this node owns, manifests, writes) goes to s.
func (n *Node) Store(s store.Store) store.Store {
	return &routedStore{Store: s, n: n, shared: newSharedReads(s, n)}
}

type routedStore struct {
	store.Store
	n      *Node
	shared *sharedReads // reads of the files this node owns
}

// Unwrap returns the store underneath (store.Exists looks through it).
func (s *routedStore) Unwrap() store.Store { return s.Store }

func (s *routedStore) String() string { return s.Store.String() }

// ReadAt reads from the file's owner when another node owns it: every
// byte arrives proven by the owner, and the cache proves each chunk again.
// A read the owner does not answer (down, refusing, a view that does not
// agree) is read from the store; one it shows no sign of life for within
// HedgeAfter is read from the store too, and the first answer wins.
func (s *routedStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if _, _, err := cache.SplitKey(key); err != nil {
		return s.Store.ReadAt(ctx, key, p, off)
	}
	owner, ok := s.n.owner(key)
	if !ok {
		if st := s.shared.stream(key, false); st != nil {
			if k, ok := st.readAt(ctx, p, off); ok {
				// The stream's bytes count once, as its download's (or,
				// without one, in chunkd_cluster_stream_bytes_total).
				store.MarkElsewhere(ctx)
				s.n.m.sharedReads.Inc()
				return k, nil
			}
		}
		return s.Store.ReadAt(ctx, key, p, off)
	}
	return s.n.forward(ctx, owner.URL, key, p, off, func(ctx context.Context, buf []byte) (int, error) {
		return s.Store.ReadAt(ctx, key, buf, off)
	})
}

// Open streams a file this node owns from the shared read of it (see
// sharedReads), so that its download and the reads while it runs cost one
// read of the store.
func (s *routedStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if _, _, err := cache.SplitKey(key); err == nil && s.n.Owns(key) {
		st := s.shared.stream(key, true)
		if size, ok := st.open(ctx); ok {
			st.joined.Store(true)
			return &streamReader{ctx: ctx, st: st}, store.Info{Key: key, Size: size}, nil
		}
	}
	return s.Store.Open(ctx, key)
}

// OpenRange streams part of a file this node owns from the shared read
// of it, as Open does (a download's ranged streams, cache/fetch.go): the
// stream counts its bytes itself and the range is marked as read from
// elsewhere (store.Origin), so that they count once. A file that is not
// shared, or another's, is streamed from the store.
func (s *routedStore) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if _, _, err := cache.SplitKey(key); err == nil && s.n.Owns(key) {
		st := s.shared.stream(key, true)
		if size, ok := st.open(ctx); ok && off+n <= size {
			store.MarkElsewhere(ctx)
			return &streamReader{ctx: ctx, st: st, off: off, end: off + n, bounded: true}, nil
		}
	}
	return store.OpenRange(ctx, s.Store, key, off, n)
}

type readResult struct {
	n   int
	err error
}

// forward reads [off, off+len(p)) of key from the owner at base, hedged
// with fromStore.
func (n *Node) forward(ctx context.Context, base, key string, p []byte, off int64, fromStore func(context.Context, []byte) (int, error)) (int, error) {
	start := time.Now()
	pctx, cancelPeer := context.WithCancel(ctx)
	defer cancelPeer()
	life := make(chan struct{}, 1)
	var signs atomic.Int64
	peerDone := make(chan readResult, 1)
	pbuf := make([]byte, len(p))
	go func() {
		err := n.peers.read(pctx, base, key, pbuf, off, func() {
			signs.Add(1)
			select {
			case life <- struct{}{}:
			default:
			}
		})
		if err != nil {
			peerDone <- readResult{err: err}
			return
		}
		peerDone <- readResult{n: len(pbuf)}
	}()

	var (
		storeDone   chan readResult
		sbuf        []byte
		cancelStore context.CancelFunc = func() {}
		peerErr     error
		hedged      bool
	)
	defer func() { cancelStore() }()
	startStore := func() {
		var sctx context.Context
		sctx, cancelStore = context.WithCancel(ctx)
		storeDone = make(chan readResult, 1)
		sbuf = make([]byte, len(p))
		go func() {
			k, err := fromStore(sctx, sbuf)
			storeDone <- readResult{k, err}
		}()
	}
	timer := time.NewTimer(n.cfg.HedgeAfter)
	defer timer.Stop()
	peerRunning := true
	for {
		select {
		case <-life:
			if storeDone == nil {
				timer.Reset(n.cfg.HedgeAfter)
			}
		case <-timer.C:
			if storeDone == nil && peerRunning {
				hedged = true
				n.m.hedges.Inc()
				n.log.Debug("forwarded read hedged: the owner showed no sign of life", "owner", base, "after", n.cfg.HedgeAfter, "signs", signs.Load(), "took", time.Since(start), "key", key, "off", off, "n", len(p))
				startStore()
			}
		case r := <-peerDone:
			peerRunning = false
			if r.err == nil {
				store.MarkElsewhere(ctx)
				copy(p, pbuf)
				n.m.forwarded(resultPeer, hedged, len(p), time.Since(start))
				return len(p), nil
			}
			peerErr = r.err
			var pe *peerError
			if errors.As(r.err, &pe) && pe.conn {
				n.markDown(base, r.err)
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			n.log.Debug("forwarded read failed; reading the store", "owner", base, "key", key, "err", r.err)
			if storeDone == nil {
				startStore()
			}
		case r := <-storeDone:
			storeDone = nil
			if r.err == nil || !peerRunning {
				cancelPeer()
				copy(p, sbuf[:r.n])
				res := resultStore
				if peerErr == nil {
					res = resultHedgeStore
				}
				n.m.forwarded(res, hedged, r.n, time.Since(start))
				if r.err != nil && peerErr != nil {
					return r.n, fmt.Errorf("%w (the owner %s: %v)", r.err, base, peerErr)
				}
				return r.n, r.err
			}
			// The store failed while the owner is still at it: wait for it.
			timer.Stop()
		}
	}
}
