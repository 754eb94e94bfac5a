package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/tablefile"
)

// result is the outcome for one address.
type result struct {
	ok   bool
	data []byte
	err  error // when !ok: why (wraps ErrNotFound when no tier has it)
}

// source says which tier an item comes from.
type source uint8

const (
	fromService source = iota
	fromStore
)

// item is what a producer (a service request or a store read running in
// its own goroutine) sends the coordinator: one chunk's answer, or, with
// done set, the end of the producer.
type item struct {
	src  source
	done bool
	ks   []int // done: the positions the producer was asked for

	k    int // position in want
	ok   bool
	data []byte   // verified against its address when ok
	tier api.Tier // the service's tier
	err  error    // when !ok
}

// fetch reads want (distinct addresses, none in memory) from the service
// and the store, and caches what it gets in memory. It returns one result
// per address; the error is only for a canceled ctx or a closed client.
//
// Chunks in the files a cache service keeps on this host
// (Options.LocalDir) are read from those files; when they hold every
// address, the reads happen right here, with no other goroutine involved.
func (c *Client) fetch(ctx context.Context, want []addr.Addr) ([]result, error) {
	local, tables := c.localChunks(ctx, want)
	if len(local) == len(want) {
		if res := c.readLocal(ctx, want, tables); res != nil {
			return res, nil
		}
		local = nil // a local copy failed: ask the service
	}
	return c.fetchTiers(ctx, want, local)
}

// readLocal reads want, every address of which the local copies tables
// hold, in the calling goroutine, and caches the chunks in memory. It
// returns nil if a read fails (a CRC mismatch, say), leaving fetchTiers
// to ask the service.
func (c *Client) readLocal(ctx context.Context, want []addr.Addr, tables []*table) []result {
	start := time.Now()
	defer func() { c.ctr.storeTime.Add(int64(time.Since(start))) }()
	snap := &snapshot{tables: tables}
	res := make([]result, len(want))
	if len(want) == 1 {
		data, err := c.st.read(ctx, snap, want[0], nil)
		if err != nil {
			return nil
		}
		res[0] = result{ok: true, data: data}
	} else {
		var failed atomic.Bool
		c.st.readMany(ctx, snap, want, func(j int, data []byte, err error) {
			if err != nil {
				failed.Store(true)
				return
			}
			res[j] = result{ok: true, data: data} // distinct j: no two calls share an element
		})
		if failed.Load() {
			return nil
		}
	}
	var bytes int64
	for k, r := range res {
		c.keep(want[k], r.data)
		bytes += int64(len(r.data))
	}
	c.ctr.storeChunks.Add(int64(len(res)))
	c.ctr.storeBytes.Add(bytes)
	return res
}

// fetchTiers is fetch through the service and the store, local marking
// the addresses the local copies hold.
//
// The service, when there is one and it is not being backed off from, is
// asked for everything first. An address goes to the store when the
// service says it has no such chunk, sends wrong bytes, fails, or sends
// nothing for ServiceTimeout (the hedge); the service may still answer
// after that, and the first correct answer wins. fetch returns as soon as
// every address has a correct answer, or has failed in every tier asked.
func (c *Client) fetchTiers(ctx context.Context, want []addr.Addr, local map[int]bool) ([]result, error) {
	n := len(want)
	cctx, cancel := context.WithCancel(ctx)
	f := &tierFetch{c: c, ctx: cctx, want: want, res: make([]result, n), chunks: make([]wanted, n), left: n}
	// On the way out, stop the producers still running (the losers of a
	// hedge) and wait for them: no goroutine outlives the call, and its
	// counts are all in Stats when it returns. Producers honour cctx, so
	// this costs about one canceled request.
	defer func() {
		cancel()
		f.producers.Wait()
	}()
	defer context.AfterFunc(c.ctx, cancel)()
	// Room for every item of an inline service request (below), which
	// sends while no one receives, and of the store read a hedge starts
	// meanwhile; else for the service's and the store's last two each.
	items := make(chan item, 2*min(n, 256)+4)
	f.send = func(it item) {
		select {
		case items <- it:
		case <-cctx.Done():
		}
	}

	var timer *time.Timer
	var hedge <-chan time.Time
	switch {
	case n <= maxInline && len(local) == 0 && c.svc != nil && c.svc.inline() && c.backoff.allow():
		f.askServiceInline()
	case c.svc != nil && c.backoff.allow() && len(local) < n:
		f.startService(local)
		if c.opts.ServiceTimeout > 0 {
			timer = time.NewTimer(c.opts.ServiceTimeout)
			defer timer.Stop()
			hedge = timer.C
		}
	default:
		if c.svc != nil && len(local) < n {
			c.ctr.svcSkipped.Add(1)
		}
		for k := range n {
			f.toStore(k)
		}
	}
	f.flush()
	for f.left > 0 && f.running > 0 {
		select {
		case <-cctx.Done():
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, ErrClosed
		case <-hedge:
			hedge = nil
			f.hedge()
		case it := <-items:
			switch {
			case it.done:
				f.running--
				if it.src == fromService {
					hedge = nil
					f.serviceDone(it.ks)
				}
			case it.src == fromService:
				f.fromService(it)
				if hedge != nil {
					timer.Reset(c.opts.ServiceTimeout) // the service is making progress
				}
			default:
				f.fromStore(it)
			}
		}
		f.flush()
	}
	for k, w := range f.chunks {
		if !w.settled && !f.res[k].ok && f.res[k].err == nil {
			f.res[k].err = errors.New("internal error: no tier answered") // not reached
		}
	}
	return f.res, nil
}

// tierFetch is the state of one fetchTiers call, kept by its coordinator
// goroutine alone: what it knows of each wanted chunk, and the producers
// it has started.
type tierFetch struct {
	c      *Client
	ctx    context.Context // canceled when fetchTiers returns
	want   []addr.Addr
	res    []result
	chunks []wanted // by position in want
	left   int      // positions not settled yet
	queue  []int    // positions to ask the store for at the next flush
	send   func(item)

	running   int // producers started and not done
	producers sync.WaitGroup
}

// wanted is what the coordinator knows of one wanted chunk.
type wanted struct {
	svcWait bool       // asked the service, no answer yet
	store   storeState // where its store read stands
	settled bool       // res holds its answer, or the failure of every tier asked
}

// storeState is where the store read of a wanted chunk stands.
type storeState uint8

const (
	storeNotAsked storeState = iota
	storeAsked
	storeFailed
)

func (f *tierFetch) settle(k int) {
	if !f.chunks[k].settled {
		f.chunks[k].settled = true
		f.left--
	}
}

// toStore queues want[k] for the store unless it is settled or was asked
// already; it settles k when both tiers have failed it.
func (f *tierFetch) toStore(k int) {
	w := &f.chunks[k]
	switch {
	case w.settled:
	case w.store == storeNotAsked:
		w.store = storeAsked
		f.queue = append(f.queue, k)
	case w.store == storeFailed && !w.svcWait:
		f.settle(k) // both tiers have answered, neither correctly
	}
}

// flush starts a store read of the queued positions.
func (f *tierFetch) flush() {
	if len(f.queue) == 0 {
		return
	}
	ks := f.queue
	f.queue = nil
	f.running++
	f.producers.Go(func() { f.c.askStore(f.ctx, f.want, ks, f.send) })
}

// startService asks the service for every position not local, and queues
// the local ones for the store (it reads the files the service keeps on
// this host directly).
func (f *tierFetch) startService(local map[int]bool) {
	ks := make([]int, 0, len(f.want))
	for k := range f.want {
		if local[k] {
			f.toStore(k)
			continue
		}
		ks = append(ks, k)
		f.chunks[k].svcWait = true
	}
	f.running++
	f.producers.Go(func() { f.c.askService(f.ctx, f.want, ks, f.send) })
}

// maxInline is the most chunks a fetch asks an inline service for in the
// calling goroutine (a lean HTTP batch: pipelined GETs on one connection).
const maxInline = leanPipelineMax

// askServiceInline asks the service for the wanted chunks (at most
// maxInline) in the calling goroutine, for a service whose get needs no
// other goroutine: a page read from SQLite runs on a locked OS thread,
// where every hand-off is a thread wake-up, so a service that answers
// within ServiceTimeout costs none. A slower one is hedged as
// startService's is: a timer starts the store read of every chunk at
// ServiceTimeout, and the store's correct answers for all of them end the
// service request. Either way, the answers are in f's items for the
// coordinator loop, as a producer's would be.
func (f *tierFetch) askServiceInline() {
	c := f.c
	ks := make([]int, len(f.want))
	for k := range ks {
		ks[k] = k
		f.chunks[k].svcWait = true
	}
	f.running++
	sctx, cancelService := context.WithCancel(f.ctx)
	defer cancelService()
	var mu sync.Mutex // guards returned and hedged
	returned, hedged := false, false
	if c.opts.ServiceTimeout > 0 {
		t := time.AfterFunc(c.opts.ServiceTimeout, func() {
			mu.Lock()
			defer mu.Unlock()
			if returned {
				return
			}
			hedged = true
			c.ctr.hedged.Add(int64(len(ks)))
			c.log.Debug("cache service is slow; asking the store too", "chunks", len(ks), "after", c.opts.ServiceTimeout)
			f.producers.Go(func() {
				var ok atomic.Int32 // the store's reads may answer from several goroutines
				c.askStore(f.ctx, f.want, ks, func(it item) {
					if it.ok && int(ok.Add(1)) == len(ks) {
						cancelService() // the store won
					}
					f.send(it)
				})
			})
		})
		defer t.Stop()
	}
	c.askService(sctx, f.want, ks, f.send)
	mu.Lock()
	returned = true
	if hedged {
		for _, k := range ks {
			f.chunks[k].store = storeAsked
		}
		f.running++
	}
	mu.Unlock()
}

// hedge queues for the store every position the service has not answered
// in time.
func (f *tierFetch) hedge() {
	hedged := 0
	for k, w := range f.chunks {
		if w.svcWait && w.store == storeNotAsked && !w.settled {
			f.toStore(k)
			hedged++
		}
	}
	f.c.ctr.hedged.Add(int64(hedged))
	if hedged > 0 {
		f.c.log.Debug("cache service is slow; asking the store too", "chunks", hedged, "after", f.c.opts.ServiceTimeout)
	}
}

// serviceDone sends to the store the positions of ks the finished service
// request never answered.
func (f *tierFetch) serviceDone(ks []int) {
	for _, k := range ks {
		if f.chunks[k].svcWait {
			f.chunks[k].svcWait = false
			f.toStore(k)
		}
	}
}

// found settles k with data, verified, unless another tier won; it
// reports whether this answer is the one kept.
func (f *tierFetch) found(k int, data []byte) bool {
	if f.chunks[k].settled {
		return false
	}
	f.res[k] = result{ok: true, data: data}
	f.settle(k)
	f.c.keep(f.want[k], data)
	return true
}

func (f *tierFetch) fromService(it item) {
	f.chunks[it.k].svcWait = false
	if !it.ok {
		f.toStore(it.k)
		return
	}
	if f.found(it.k, it.data) {
		f.c.ctr.service(it.tier, len(it.data))
	}
}

func (f *tierFetch) fromStore(it item) {
	if it.ok {
		if f.found(it.k, it.data) {
			f.c.ctr.storeChunks.Add(1)
			f.c.ctr.storeBytes.Add(int64(len(it.data)))
		}
		return
	}
	w := &f.chunks[it.k]
	w.store = storeFailed
	if !w.settled {
		f.res[it.k] = result{err: it.err}
	}
	if !w.svcWait {
		f.settle(it.k)
	}
}

// keep puts a verified chunk in the memory tier.
func (c *Client) keep(a addr.Addr, data []byte) {
	if c.mem != nil {
		c.mem.Set(a, data)
	}
}

// askService asks the service for want[k] for every k in ks, and sends
// the coordinator each answer, checked against its address, then done.
func (c *Client) askService(ctx context.Context, want []addr.Addr, ks []int, send func(item)) {
	start := time.Now()
	// deliver sends the answer r for want[k], checked against its
	// address (sum: its contents' address, computed by the caller).
	deliver := func(k int, r reply, sum addr.Addr) {
		it := item{src: fromService, k: k, tier: r.tier}
		switch {
		case !r.found:
			c.ctr.svcNotFound.Add(1)
			it.err = ErrNotFound
		case sum != want[k]:
			c.ctr.svcBad.Add(1)
			c.log.Warn("cache service sent a chunk that does not match its address; reading it from the store",
				"service", c.svc.String(), "db", c.opts.DB, "address", want[k].String(), "hashes_to", sum.String(), "tier", r.tier.String())
			it.err = &ChunkError{Addr: want[k], Tier: TierService, From: c.svc.String(), Err: corruptHash(sum)}
		default:
			it.ok, it.data = true, r.data
		}
		send(it)
	}
	var err error
	if len(ks) == 1 {
		c.ctr.svcRequests.Add(1)
		var r reply
		if r, err = c.svc.get(ctx, want[ks[0]]); err == nil {
			deliver(ks[0], r, addr.Of(r.data))
		}
	} else {
		as := make([]addr.Addr, len(ks))
		for j, k := range ks {
			as[j] = want[k]
		}
		// Answers already in hand are checked together (addr.OfAll,
		// several chunks at once), one request's at a time: the answers
		// of a request come in one goroutine.
		held := make([]heldAnswers, (len(as)+api.MaxBatch-1)/api.MaxBatch)
		err = c.serviceBatches(ctx, as, func(j int, r reply) {
			h := &held[j/api.MaxBatch]
			h.add(ks[j], r)
			if !r.more || h.full() {
				h.flush(deliver)
			}
		})
		for i := range held {
			held[i].flush(deliver) // a request cut short
		}
	}
	c.ctr.svcTime.Add(int64(time.Since(start)))
	c.serviceDone(ctx, err)
	send(item{src: fromService, done: true, ks: ks})
}

// heldAnswers are a request's answers held to be checked together.
type heldAnswers struct {
	ks      []int
	replies []reply
	data    [][]byte
	sums    []addr.Addr
}

// checkTogether is the most answers checked at once.
const checkTogether = 16

func (h *heldAnswers) add(k int, r reply) {
	h.ks = append(h.ks, k)
	h.replies = append(h.replies, r)
}

func (h *heldAnswers) full() bool { return len(h.ks) >= checkTogether }

// flush hashes the held answers' chunks together and delivers each.
func (h *heldAnswers) flush(deliver func(k int, r reply, sum addr.Addr)) {
	n := len(h.ks)
	if n == 0 {
		return
	}
	h.data = h.data[:0]
	for _, r := range h.replies {
		h.data = append(h.data, r.data)
	}
	h.sums = slices.Grow(h.sums[:0], n)[:n]
	addr.OfAll(h.data, h.sums)
	for i, k := range h.ks {
		deliver(k, h.replies[i], h.sums[i])
	}
	h.ks, h.replies = h.ks[:0], h.replies[:0]
	clear(h.data)
}

// serviceBatches asks the service for as in requests of at most
// api.MaxBatch addresses, several at once. fn may be called from several
// goroutines at once.
func (c *Client) serviceBatches(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) error {
	if len(as) <= api.MaxBatch {
		c.ctr.svcRequests.Add(1)
		return c.svc.getMany(ctx, as, fn)
	}
	var parts [][2]int
	for lo := 0; lo < len(as); lo += api.MaxBatch {
		parts = append(parts, [2]int{lo, min(lo+api.MaxBatch, len(as))})
	}
	errs := make([]error, len(parts))
	runLimited(len(parts), c.opts.Concurrency, func(p int) {
		lo, hi := parts[p][0], parts[p][1]
		c.ctr.svcRequests.Add(1)
		errs[p] = c.svc.getMany(ctx, as[lo:hi], func(j int, r reply) { fn(lo+j, r) })
	})
	for _, err := range errs {
		var se *serviceError
		if errors.As(err, &se) && se.conn {
			return err // the one that matters for backing off
		}
	}
	return errors.Join(errs...)
}

// serviceDone counts a finished service request and backs off after a
// connection failure.
func (c *Client) serviceDone(ctx context.Context, err error) {
	if err == nil {
		c.backoff.succeed()
		if c.svcErr.Load() != nil {
			c.svcErr.Store(nil)
		}
		return
	}
	if ctx.Err() != nil {
		return // canceled by us (a hedge won) or by the caller: not the service's fault
	}
	c.svcErr.Store(&err)
	c.ctr.svcErrors.Add(1)
	var se *serviceError
	if errors.As(err, &se) && se.conn {
		if d, started := c.backoff.fail(); started {
			c.ctr.svcBackoffs.Add(1)
			what := "cache service unreachable; reading from the store"
			if se.refused {
				what = "cache service refused the client (check the token and its databases); reading from the store"
			}
			c.log.Warn(what, "service", c.svc.String(), "retry_in", d, "err", err)
		}
		return
	}
	c.log.Warn("cache service request failed; reading from the store", "service", c.svc.String(), "err", err)
}

// askStore reads want[k] for every k in ks from the store and sends the
// coordinator each chunk or failure, then done.
func (c *Client) askStore(ctx context.Context, want []addr.Addr, ks []int, send func(item)) {
	start := time.Now()
	defer func() { c.ctr.storeTime.Add(int64(time.Since(start))) }()
	snap := c.st.localSnapshot(ctx, want, ks)
	var err error
	if snap == nil {
		snap, err = c.st.current(ctx)
	}
	if p := c.svcErr.Load(); p != nil && errors.Is(err, errNoStore) {
		// Why the service did not give the chunks: the cause.
		err = fmt.Errorf("%w; its last request failed: %w", errNoStore, *p)
	}
	if err != nil {
		for _, k := range ks {
			err := err
			if errors.Is(err, errNoStore) && c.svc != nil && c.svcErr.Load() == nil {
				// The service answered, without the chunk: say so.
				err = fmt.Errorf("client: chunk %s of database %q: the cache service %s does not hold it, and there is no store (Options.Store) to look in: %w", want[k], c.opts.DB, c.svc, errNoStore)
			}
			send(item{src: fromStore, k: k, err: err})
		}
		send(item{src: fromStore, done: true, ks: ks})
		return
	}
	deliver := func(k int, data []byte, err error) {
		send(item{src: fromStore, k: k, ok: err == nil, data: data, err: err})
	}
	if len(ks) == 1 {
		data, err := c.st.read(ctx, snap, want[ks[0]], nil)
		deliver(ks[0], data, err)
	} else {
		as := make([]addr.Addr, len(ks))
		for j, k := range ks {
			as[j] = want[k]
		}
		c.st.readMany(ctx, snap, as, func(j int, data []byte, err error) { deliver(ks[j], data, err) })
	}
	send(item{src: fromStore, done: true, ks: ks})
}

// runLimited calls fn(0..n-1) on at most limit goroutines and waits.
func runLimited(n, limit int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	workers := min(n, max(limit, 1))
	next := make(chan int)
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		<-done
	}
}

// localChunks marks the addresses held by table files opened from
// Options.LocalDir, and returns those files; nil when there is no LocalDir
// or no service to skip.
func (c *Client) localChunks(ctx context.Context, want []addr.Addr) (map[int]bool, []*table) {
	if c.opts.LocalDir == "" || c.svc == nil {
		return nil, nil
	}
	tables := c.st.localTables(ctx)
	if len(tables) == 0 {
		return nil, nil
	}
	var local map[int]bool
	for k, a := range want {
		if _, _, ok := tablefile.Find(tables, (*table).index, a); ok {
			if local == nil {
				local = make(map[int]bool)
			}
			local[k] = true
		}
	}
	return local, tables
}
