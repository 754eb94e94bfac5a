package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
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

// Store states of a position in fetch.
const (
	storeNotAsked = iota
	storeAsked
	storeFailed
)

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
	res := make([]result, n)
	cctx, cancel := context.WithCancel(ctx)
	// On the way out, stop the producers still running (the losers of a
	// hedge) and wait for them: no goroutine outlives the call, and its
	// counts are all in Stats when it returns. Producers honour cctx, so
	// this costs about one canceled request.
	var producers sync.WaitGroup
	defer func() {
		cancel()
		producers.Wait()
	}()
	defer context.AfterFunc(c.ctx, cancel)()
	items := make(chan item, min(n, 256)+2)
	send := func(it item) {
		select {
		case items <- it:
		case <-cctx.Done():
		}
	}

	svcWait := make([]bool, n) // asked the service, no answer yet
	storeState := make([]uint8, n)
	settled := make([]bool, n)
	left := n
	settle := func(k int) {
		if !settled[k] {
			settled[k] = true
			left--
		}
	}
	var queue []int // positions to ask the store for
	toStore := func(k int) {
		switch {
		case settled[k]:
		case storeState[k] == storeNotAsked:
			storeState[k] = storeAsked
			queue = append(queue, k)
		case storeState[k] == storeFailed && !svcWait[k]:
			settle(k) // both tiers have answered, neither correctly
		}
	}
	running := 0
	flush := func() {
		if len(queue) > 0 {
			ks := queue
			queue = nil
			running++
			producers.Go(func() { c.askStore(cctx, want, ks, send) })
		}
	}

	var timer *time.Timer
	var hedge <-chan time.Time
	// Chunks in files the service keeps on this host are read directly.
	if c.svc != nil && c.backoff.allow() && len(local) < n {
		ks := make([]int, 0, n)
		for k := range n {
			if local[k] {
				toStore(k)
				continue
			}
			ks = append(ks, k)
			svcWait[k] = true
		}
		running++
		producers.Go(func() { c.askService(cctx, want, ks, send) })
		if c.opts.ServiceTimeout > 0 {
			timer = time.NewTimer(c.opts.ServiceTimeout)
			defer timer.Stop()
			hedge = timer.C
		}
	} else {
		if c.svc != nil && len(local) < n {
			c.ctr.svcSkipped.Add(1)
		}
		for k := range n {
			toStore(k)
		}
	}
	flush()
	for left > 0 && running > 0 {
		select {
		case <-cctx.Done():
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, ErrClosed
		case <-hedge:
			hedge = nil
			hedged := 0
			for k := range n {
				if svcWait[k] && storeState[k] == storeNotAsked && !settled[k] {
					toStore(k)
					hedged++
				}
			}
			c.ctr.hedged.Add(int64(hedged))
			if hedged > 0 {
				c.log.Debug("cache service is slow; asking the store too", "chunks", hedged, "after", c.opts.ServiceTimeout)
			}
		case it := <-items:
			switch {
			case it.done:
				running--
				if it.src == fromService {
					hedge = nil
					for _, k := range it.ks {
						if svcWait[k] { // the service never answered it
							svcWait[k] = false
							toStore(k)
						}
					}
				}
			case it.src == fromService:
				svcWait[it.k] = false
				if it.ok {
					if !settled[it.k] {
						res[it.k] = result{ok: true, data: it.data}
						settle(it.k)
						c.keep(want[it.k], it.data)
						c.ctr.service(it.tier, len(it.data))
					}
				} else {
					toStore(it.k)
				}
				if hedge != nil {
					timer.Reset(c.opts.ServiceTimeout) // the service is making progress
				}
			default: // from the store
				if it.ok {
					if !settled[it.k] {
						res[it.k] = result{ok: true, data: it.data}
						settle(it.k)
						c.keep(want[it.k], it.data)
						c.ctr.storeChunks.Add(1)
						c.ctr.storeBytes.Add(int64(len(it.data)))
					}
				} else {
					storeState[it.k] = storeFailed
					if !settled[it.k] {
						res[it.k] = result{err: it.err}
					}
					if !svcWait[it.k] {
						settle(it.k)
					}
				}
			}
		}
		flush()
	}
	for k := range res {
		if !settled[k] && !res[k].ok && res[k].err == nil {
			res[k].err = errors.New("internal error: no tier answered") // not reached
		}
	}
	return res, nil
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
	deliver := func(k int, r reply) {
		it := item{src: fromService, k: k, tier: r.tier}
		switch {
		case !r.found:
			c.ctr.svcNotFound.Add(1)
			it.err = ErrNotFound
		case addr.Of(r.data) != want[k]:
			c.ctr.svcBad.Add(1)
			got := addr.Of(r.data)
			c.log.Warn("cache service sent a chunk that does not match its address; reading it from the store",
				"service", c.svc.String(), "db", c.opts.DB, "address", want[k].String(), "hashes_to", got.String(), "tier", r.tier.String())
			it.err = &ChunkError{Addr: want[k], Tier: TierService, From: c.svc.String(), Err: corruptHash(got)}
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
			deliver(ks[0], r)
		}
	} else {
		as := make([]addr.Addr, len(ks))
		for j, k := range ks {
			as[j] = want[k]
		}
		err = c.serviceBatches(ctx, as, func(j int, r reply) { deliver(ks[j], r) })
	}
	c.ctr.svcTime.Add(int64(time.Since(start)))
	c.serviceDone(ctx, err)
	send(item{src: fromService, done: true, ks: ks})
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
		return
	}
	if ctx.Err() != nil {
		return // canceled by us (a hedge won) or by the caller: not the service's fault
	}
	c.ctr.svcErrors.Add(1)
	var se *serviceError
	if errors.As(err, &se) && se.conn {
		if d, started := c.backoff.fail(); started {
			c.ctr.svcBackoffs.Add(1)
			c.log.Warn("cache service unreachable; reading from the store", "service", c.svc.String(), "retry_in", d, "err", err)
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
	if err != nil {
		for _, k := range ks {
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
		for _, t := range tables {
			if !t.t.MayContain(a) {
				continue
			}
			if _, ok := t.t.Lookup(a); ok {
				if local == nil {
					local = make(map[int]bool)
				}
				local[k] = true
				break
			}
		}
	}
	return local, tables
}
