package store

import (
	"context"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Hedged is a store whose reads are hedged: a read that has not answered
// within a deadline derived from the latencies of recent reads of its size
// (their 95th percentile, by default, and a quarter more) gets a second,
// identical request,
// and the first answer wins; the other is cancelled. One slow request in
// twenty then costs its reader about the deadline rather than the store's
// timeout ("The Tail at Scale", Dean and Barroso). Objects are immutable
// by convention, so both requests bring the same bytes.
//
// Hedges are bounded: at most HedgeOptions.Ratio of reads (plus a small
// burst) are hedged, so a store that is slow for everyone is not asked
// twice as often; and the deadline follows the store, so a store that is
// uniformly slow sets a later deadline rather than more hedges.
//
// ReadAt, Get, Head, Open and OpenRange are hedged (for streams, the wait
// for the response to start); writes, List and Delete are not.
type Hedged struct {
	s    Store
	opts HedgeOptions

	classes [hedgeClasses]latencies

	mu     sync.Mutex
	tokens float64 // hedges the budget allows now (HedgeOptions.Ratio per read)

	reads, hedges, wins atomic.Int64
}

// HedgeOptions tune Hedge. Zero fields take the defaults.
type HedgeOptions struct {
	// Percentile of recent latencies (of reads of about the same size)
	// after which a read is hedged; default 95.
	Percentile float64
	// Ratio is the most hedges per read over time (default 0.1), with a
	// burst of Burst (default 10).
	Ratio float64
	Burst float64
	// Min is the earliest a read is hedged (default 2 ms), however fast
	// the store has been: below it, a second request costs more than the
	// wait it might save.
	Min time.Duration
	// Initial is the deadline before enough latencies of a size are known
	// (default 1 s).
	Initial time.Duration
}

func (o *HedgeOptions) setDefaults() {
	if o.Percentile <= 0 || o.Percentile >= 100 {
		o.Percentile = 95
	}
	if o.Ratio <= 0 {
		o.Ratio = 0.1
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Min <= 0 {
		o.Min = 2 * time.Millisecond
	}
	if o.Initial <= 0 {
		o.Initial = time.Second
	}
}

// Hedge returns s with its reads hedged.
func Hedge(s Store, opts HedgeOptions) *Hedged {
	opts.setDefaults()
	return &Hedged{s: s, opts: opts, tokens: opts.Burst}
}

// HedgeStats counts a Hedged store's reads.
type HedgeStats struct {
	Reads  int64 // reads asked for (each one, however many requests it took)
	Hedges int64 // second requests sent
	Wins   int64 // second requests that answered first
}

// Stats returns the counts so far.
func (h *Hedged) Stats() HedgeStats {
	return HedgeStats{Reads: h.reads.Load(), Hedges: h.hedges.Load(), Wins: h.wins.Load()}
}

// Deadline returns how long a read of n bytes may take before it is
// hedged: the latency recent reads of about its size stayed within, at the
// configured percentile, and a quarter more (a margin for the jitter of a
// busy host, which would otherwise hedge more than the percentile says).
// Callers that wait for bytes on their way from the store by another route
// (a download) can wait as long before reading them.
func (h *Hedged) Deadline(n int64) time.Duration {
	d, ok := h.classes[hedgeClass(n)].deadline(h.opts.Percentile)
	if !ok {
		return h.opts.Initial
	}
	return max(d+d/4, h.opts.Min)
}

// Typical returns how long a read of n bytes usually takes: the median
// of recent reads of about its size, or, before there are any, of all
// recent reads; 0 before any read has answered.
func (h *Hedged) Typical(n int64) time.Duration {
	if d, ok := h.classes[hedgeClass(n)].median(); ok {
		return d
	}
	var all []time.Duration
	for i := range h.classes {
		all = append(all, h.classes[i].window()...)
	}
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[len(all)/2]
}

// Unwrap returns the store whose reads are hedged.
func (h *Hedged) Unwrap() Store { return h.s }

func (h *Hedged) String() string { return h.s.String() }

// The size classes of reads whose latencies are kept apart: below 64 KiB
// (time to first byte: Head, Get of small objects, streams), below 512 KiB,
// below 4 MiB, and larger.
const hedgeClasses = 4

func hedgeClass(n int64) int {
	switch {
	case n < 64<<10:
		return 0
	case n < 512<<10:
		return 1
	case n < 4<<20:
		return 2
	}
	return 3
}

// latencies is a window of the latest latencies of one class.
type latencies struct {
	mu    sync.Mutex
	ring  [128]time.Duration
	n     int // observed, in all
	cache time.Duration
	stale bool
}

// minSamples is how many latencies a class needs before its percentile
// sets the deadline.
const minSamples = 16

func (l *latencies) observe(d time.Duration) {
	l.mu.Lock()
	l.ring[l.n%len(l.ring)] = d
	l.n++
	l.stale = true
	l.mu.Unlock()
}

// window returns the latencies kept.
func (l *latencies) window() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ring[:min(l.n, len(l.ring))])
}

// median returns the median of the latencies kept; false if there are
// none.
func (l *latencies) median() (time.Duration, bool) {
	w := l.window()
	if len(w) == 0 {
		return 0, false
	}
	slices.Sort(w)
	return w[len(w)/2], true
}

func (l *latencies) deadline(pct float64) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < minSamples {
		return 0, false
	}
	if l.stale {
		w := slices.Clone(l.ring[:min(l.n, len(l.ring))])
		slices.Sort(w)
		l.cache = w[min(len(w)-1, int(float64(len(w))*pct/100))]
		l.stale = false
	}
	return l.cache, true
}

// spend takes a hedge from the budget, if it has one.
func (h *Hedged) spend() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens < 1 {
		return false
	}
	h.tokens--
	return true
}

// earn adds one read's share to the budget.
func (h *Hedged) earn() {
	h.mu.Lock()
	h.tokens = min(h.tokens+h.opts.Ratio, h.opts.Burst)
	h.mu.Unlock()
}

type attempt[T any] struct {
	v     T
	err   error
	took  time.Duration
	hedge bool
	// elsewhere: a wrapper answered it from elsewhere than the store
	// (Origin), so its latency says nothing of the store's.
	elsewhere bool
}

// hedged runs one read with do, hedged after the deadline of reads of n
// bytes: the first success wins and the other request is cancelled (drop
// releases its answer, if it has one); an error is returned only once no
// request can still succeed, with the value of the request that failed
// first (a read cut short returns the bytes it had). A ctx already done
// sends no request. do's hedge says which request it runs. With
// settle, a hedge that wins waits for the first request to return (after
// its cancellation) before hedged does: the first request may write to
// memory the caller will use.
func hedged[T any](h *Hedged, ctx context.Context, n int64, settle bool, do func(ctx context.Context, hedge bool) (T, error), drop func(T)) (T, bool, error) {
	if err := ctx.Err(); err != nil { // no request: a stream would not see it (openHedged)
		var zero T
		return zero, false, err
	}
	h.reads.Add(1)
	h.earn()
	class := &h.classes[hedgeClass(n)]
	results := make(chan attempt[T], 2)
	launch := func(hedge bool) context.CancelFunc {
		actx, cancel := context.WithCancel(ctx)
		actx, origin := TrackOrigin(actx)
		go func() {
			start := time.Now()
			v, err := do(actx, hedge)
			results <- attempt[T]{v, err, time.Since(start), hedge, origin.Elsewhere()}
		}()
		return cancel
	}
	cancels := []context.CancelFunc{launch(false)}
	cancelAll := func() {
		for _, c := range cancels {
			c()
		}
	}
	defer cancelAll()
	timer := time.NewTimer(h.Deadline(n))
	defer timer.Stop()
	running := 1
	var failed *attempt[T] // the first request that failed
	for {
		select {
		case a := <-results:
			running--
			if a.err == nil {
				if a.elsewhere {
					MarkElsewhere(ctx) // for the caller's Origin, if it tracks one
				} else {
					class.observe(a.took)
				}
				if a.hedge {
					h.wins.Add(1)
				}
				if running > 0 {
					cancelAll()
					if a.hedge && settle {
						if b := <-results; b.err == nil && drop != nil {
							drop(b.v)
						}
					} else {
						go func() {
							if b := <-results; b.err == nil && drop != nil {
								drop(b.v)
							}
						}()
					}
				}
				return a.v, a.hedge, nil
			}
			if failed == nil {
				failed = &a
			}
			if running == 0 || ctx.Err() != nil {
				if running > 0 {
					cancelAll()
					<-results // the other request may write to the caller's memory
				}
				// The failed request's value too: a read that ended early
				// returns the bytes it had.
				return failed.v, failed.hedge, failed.err
			}
		case <-timer.C:
			if len(cancels) == 1 && ctx.Err() == nil && h.spend() {
				h.hedges.Add(1)
				cancels = append(cancels, launch(true))
				running++
			}
		}
	}
}

// ReadAt reads len(p) bytes at off, hedged (readHedged).
func (h *Hedged) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, _, err := h.readHedged(ctx, p, func(ctx context.Context, b []byte) (int, int64, error) {
		n, err := h.s.ReadAt(ctx, key, b, off)
		return n, 0, err
	})
	return n, err
}

// ReadTail reads the end of an object and its size (TailReader), hedged
// (readHedged).
func (h *Hedged) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	return h.readHedged(ctx, p, func(ctx context.Context, b []byte) (int, int64, error) {
		return ReadTail(ctx, h.s, key, b)
	})
}

// readHedged hedges read, which reads into a buffer of len(p) and
// returns how many bytes it read and the object's size (0 if it does not
// learn it). The first request reads into p; a second one into a buffer
// of its own, copied into p if it wins (or failed first, with the bytes
// it had), once the first has returned.
func (h *Hedged) readHedged(ctx context.Context, p []byte, read func(ctx context.Context, b []byte) (int, int64, error)) (int, int64, error) {
	type result struct {
		b    []byte
		n    int
		size int64
	}
	r, hedge, err := hedged(h, ctx, int64(len(p)), true, func(ctx context.Context, hedge bool) (result, error) {
		b := p
		if hedge {
			b = make([]byte, len(p))
		}
		n, size, err := read(ctx, b)
		return result{b, n, size}, err
	}, nil)
	if hedge {
		copy(p, r.b[:r.n])
	}
	return r.n, r.size, err
}

// Get reads a whole object, hedged.
func (h *Hedged) Get(ctx context.Context, key string) ([]byte, error) {
	b, _, err := hedged(h, ctx, 0, false, func(ctx context.Context, _ bool) ([]byte, error) { return h.s.Get(ctx, key) }, nil)
	return b, err
}

// Head returns an object's size, time and version, hedged.
func (h *Hedged) Head(ctx context.Context, key string) (Info, error) {
	info, _, err := hedged(h, ctx, 0, false, func(ctx context.Context, _ bool) (Info, error) { return h.s.Head(ctx, key) }, nil)
	return info, err
}

type opened struct {
	rc   io.ReadCloser
	info Info
}

// Open streams a whole object; the wait for the stream to open is hedged.
func (h *Hedged) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	o, err := h.openHedged(ctx, func(ctx context.Context) (opened, error) {
		rc, info, err := h.s.Open(ctx, key)
		return opened{rc, info}, err
	})
	return o.rc, o.info, err
}

// OpenRange streams part of an object (RangeReader); the wait for the
// stream to open is hedged.
func (h *Hedged) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	o, err := h.openHedged(ctx, func(ctx context.Context) (opened, error) {
		rc, err := OpenRange(ctx, h.s, key, off, n)
		return opened{rc: rc}, err
	})
	return o.rc, err
}

// openHedged hedges the opening of a stream. A stream must outlive its
// request's context, which hedged cancels once it returns: each request
// opens its stream under a context of its own, ended by the caller's ctx,
// by the stream's Close, and, until the stream is open, by the request's
// own cancellation (it lost).
func (h *Hedged) openHedged(ctx context.Context, open func(ctx context.Context) (opened, error)) (opened, error) {
	o, _, err := hedged(h, ctx, 0, false, func(actx context.Context, _ bool) (opened, error) {
		sctx, cancel := context.WithCancel(context.WithoutCancel(actx)) // actx's values: its Origin
		stopCaller := context.AfterFunc(ctx, cancel)
		stopRequest := context.AfterFunc(actx, cancel)
		o, err := open(sctx)
		stopRequest()
		if err != nil {
			stopCaller()
			cancel()
			return o, err
		}
		o.rc = &hedgedStream{ReadCloser: o.rc, cancel: func() { stopCaller(); cancel() }}
		return o, nil
	}, func(o opened) { o.rc.Close() })
	return o, err
}

// hedgedStream is a stream that hedged opened; closing it ends its
// request's context.
type hedgedStream struct {
	io.ReadCloser
	cancel func()
}

func (s *hedgedStream) Close() error {
	err := s.ReadCloser.Close()
	s.cancel()
	return err
}

// The rest of Store, not hedged.

func (h *Hedged) Put(ctx context.Context, key string, data []byte) error {
	return h.s.Put(ctx, key, data)
}

func (h *Hedged) List(ctx context.Context, prefix string) ([]Info, error) {
	return h.s.List(ctx, prefix)
}

func (h *Hedged) Delete(ctx context.Context, key string) error { return h.s.Delete(ctx, key) }

func (h *Hedged) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	return h.s.PutIf(ctx, key, data, ifVersion)
}

func (h *Hedged) Close() error { return h.s.Close() }
