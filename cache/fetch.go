package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/chunkd/chunkd/store"
)

// How a download fetches its file. Two kinds of fetchers claim blocks and
// write them (blocks.go):
//
//   - streams: ranged GETs of a segment of the file (store.OpenRange),
//     several at once per file. Background streams, which fetch ahead of
//     readers, each hold one of the service's --downloads slots, and
//     write what arrives unproven, for the prover (proof.go) to prove on
//     a low-priority thread: a slot is never held by hashing. Streams a
//     reader starts (FileReader.Copy's read-ahead) hold no slot and prove
//     what they fetch as it arrives.
//   - demand reads: a reader that needs blocks no one fetches reads them
//     itself with one ranged read, proves them, and writes them, like a
//     read through the store that also fills the download.
//
// A reader that needs a block a stream will bring waits for it when the
// stream is about to (its bytes are within a round trip's worth of what
// the stream has received), and else takes the block, and the rest of the
// stream's segment, from the stream. It waits at most the store's hedge
// deadline before it reads the bytes from the store itself: a stalled
// stream costs a reader no more than a slow read would.
const (
	// backgroundStreams is how many background streams a file has at once.
	backgroundStreams = 8
	// A background stream fetches an eighth of the file, between
	// minSegment and maxSegment: large enough that its round trip is a
	// small part of its time at S3's ~100 MB/s a connection (and at the
	// speed of a store on the same host), small enough that a file is
	// fetched by several at once.
	minSegment = 4 << 20
	maxSegment = 32 << 20
	// readAheadSegment and readAheadWindow are the segments of the streams
	// a whole-file reader starts ahead of itself, and how far ahead.
	readAheadSegment = 4 << 20
	readAheadWindow  = 16 << 20
	// maxDemandRead is the most one demand read fetches.
	maxDemandRead = 4 << 20
	// maxStreamFailures is how many stream failures in a row, with no
	// block arriving between them, fail the download.
	maxStreamFailures = 5
)

// stream is one ranged GET of a download: blocks [from, hi) of the file.
// A reader that takes the tail of the segment lowers hi, never below
// next, the first block the stream has not begun to write.
type stream struct {
	from, next, hi int
	last           int       // hi as claimed
	prove          bool      // prove what arrives (a reader's stream), or leave it to the prover
	opened         time.Time // when it asked the store (download.mu)
	flowing        time.Time // when its first bytes came (download.mu)
	lastByte       time.Time // when its last bytes came (download.mu)
	got            int64     // bytes received (download.mu)
}

// fill runs the download's background streams and prover until every
// block is proven, the download fails, or the service closes.
func (dl *download) fill() error {
	e := dl.t.env
	// The provers are not waited for: on its low-priority thread one may
	// take long to see that it has nothing left to do.
	go e.disk.hooks.background(dl.proveArrived)
	go dl.proveWhenQuiet()
	for {
		dl.mu.Lock()
		if dl.err != nil || dl.proven == len(dl.state) {
			err := dl.err
			dl.mu.Unlock()
			return err
		}
		ch := dl.changed
		more := dl.backgroundRunning() < dl.backgroundWanted(time.Now()) && dl.firstMissing(dl.cursor) >= 0
		dl.mu.Unlock()
		if !more {
			select {
			case <-ch:
			case <-dl.ctx.Done():
				return dl.ctx.Err()
			}
			continue
		}
		select {
		case e.dlSlots <- struct{}{}:
			s := dl.claimStream(dl.nextBackground(), min(max(dl.t.size/8, minSegment), maxSegment), false)
			if s == nil {
				<-e.dlSlots
				continue
			}
			dl.wg.Add(1)
			go func() {
				defer dl.wg.Done()
				defer func() { <-e.dlSlots }()
				dl.run(s)
			}()
		case <-ch:
		case <-dl.ctx.Done():
			return dl.ctx.Err()
		}
	}
}

// backgroundRunning counts the background streams running (download.mu).
func (dl *download) backgroundRunning() int {
	n := 0
	for _, s := range dl.streams {
		if !s.prove {
			n++
		}
	}
	return n
}

// backgroundWanted is how many background streams the download should run
// (download.mu): two at first, twice as many (up to backgroundStreams)
// each time those running all deliver and, together, slower than
// enoughRate. Parallel streams are for a store that serves each connection
// at a bounded rate (S3); against one that a stream or two drain as fast
// as the service can prove, more would only take the cores from the reads
// the download is for.
func (dl *download) backgroundWanted(now time.Time) int {
	if dl.wanted == 0 {
		dl.wanted = 2
	}
	running, flowing := 0, 0
	var rate float64
	for _, s := range dl.streams {
		if s.prove {
			continue
		}
		running++
		if d := now.Sub(s.flowing); s.got > 0 && d > 10*time.Millisecond {
			flowing++
			rate += float64(s.got) / d.Seconds()
		}
	}
	if running >= dl.wanted && flowing == running && rate < enoughRate {
		dl.wanted = min(2*dl.wanted, backgroundStreams)
	}
	return dl.wanted
}

// enoughRate is the rate of a download's background streams, together,
// beyond which it starts no more of them: about what two cores prove.
const enoughRate = 500e6

// stop ends the download's streams (with the download's error, if it
// failed) and waits for them; readers waiting for its blocks are woken.
func (dl *download) stop(err error) {
	if dl.m == nil {
		return
	}
	dl.mu.Lock()
	if err != nil && dl.err == nil {
		dl.err = err
	}
	if dl.err == nil && dl.proven < len(dl.state) {
		dl.err = errDownloadEnded
	}
	dl.wake()
	dl.mu.Unlock()
	dl.cancel()
	dl.wg.Wait()
}

// fail fails the download with err.
func (dl *download) fail(err error) {
	dl.mu.Lock()
	if dl.err == nil {
		dl.err = err
		dl.wake()
	}
	dl.mu.Unlock()
	dl.cancel()
}

// wake tells those waiting on the download that something changed
// (download.mu held).
func (dl *download) wake() {
	close(dl.changed)
	dl.changed = make(chan struct{})
}

// firstMissing returns the first missing block at or after from, or, if
// there is none, before it; -1 if none is missing (download.mu held).
func (dl *download) firstMissing(from int) int {
	for i := from; i < len(dl.state); i++ {
		if dl.state[i] == blockMissing {
			return i
		}
	}
	for i := 0; i < from && i < len(dl.state); i++ {
		if dl.state[i] == blockMissing {
			return i
		}
	}
	return -1
}

// nextBackground returns where the next background stream starts.
func (dl *download) nextBackground() int {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return max(0, dl.firstMissing(dl.cursor))
}

// claimStream claims the run of missing blocks from block at (or the
// first missing one after it) up to about segment bytes for a new stream;
// nil if none is missing.
func (dl *download) claimStream(at int, segment int64, prove bool) *stream {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.err != nil {
		return nil
	}
	i := dl.firstMissing(at)
	if i < 0 {
		return nil
	}
	j := i
	lo, _ := dl.m.span(i)
	for j < len(dl.state) && dl.state[j] == blockMissing {
		if _, hi := dl.m.span(j); j > i && hi-lo > segment {
			break
		}
		j++
	}
	s := &stream{from: i, next: i, hi: j, last: j, prove: prove}
	for b := i; b < j; b++ {
		dl.state[b], dl.owner[b] = blockStreamed, s
	}
	dl.streams = append(dl.streams, s)
	return s
}

// readAhead starts streams for the missing blocks of bytes [lo, hi), a
// whole-file reader's window ahead of itself: they hold no slot, and
// prove what they fetch.
func (dl *download) readAhead(lo, hi int64) {
	i, j := dl.m.covering(lo, hi)
	for {
		dl.mu.Lock()
		at := -1
		for b := i; b < j; b++ {
			if dl.state[b] == blockMissing {
				at = b
				break
			}
		}
		dl.mu.Unlock()
		if at < 0 {
			return
		}
		s := dl.claimStream(at, readAheadSegment, true)
		if s == nil {
			return
		}
		dl.wg.Add(1)
		go func() {
			defer dl.wg.Done()
			dl.run(s)
		}()
	}
}

// run fetches stream s's blocks with one ranged GET, writing (and, for a
// reader's stream, proving) each block as it completes. Blocks it leaves
// unwritten (it failed, or a reader took them) go back to missing.
func (dl *download) run(s *stream) {
	t := dl.t
	e := t.env
	err := dl.runStream(s)
	dl.mu.Lock()
	for b := s.from; b < s.last; b++ {
		if dl.owner[b] == s { // not written: fetched again later
			dl.state[b], dl.owner[b] = blockMissing, nil
		}
	}
	if !s.flowing.IsZero() {
		if d := time.Since(s.flowing); d > 20*time.Millisecond && s.got > 256<<10 {
			e.streamRate.observe(float64(s.got) / d.Seconds())
		}
	}
	for i, x := range dl.streams {
		if x == s {
			dl.streams = append(dl.streams[:i], dl.streams[i+1:]...)
			break
		}
	}
	failed := false
	if err != nil && dl.err == nil && dl.ctx.Err() == nil {
		if errors.Is(err, errProof) {
			failed = true
		} else {
			dl.failures++
			dl.lastErr = err
			failed = dl.failures >= maxStreamFailures
		}
	}
	dl.wake()
	dl.mu.Unlock()
	if err != nil && dl.ctx.Err() == nil {
		if failed {
			dl.fail(err)
		} else {
			e.log.Debug("download stream failed; its blocks will be fetched again", "key", t.key, "err", err)
		}
	}
}

// errProof marks a stream's failure to prove what it fetched: the
// store's copy is corrupt, and the download fails at once.
var errProof = errors.New("proof failed")

func (dl *download) runStream(s *stream) error {
	t := dl.t
	e := t.env
	lo, _ := dl.m.span(s.from)
	_, hi := dl.m.span(s.last - 1)
	dl.mu.Lock()
	s.opened = time.Now()
	dl.mu.Unlock()
	// No overall deadline (a large segment on a slow link takes what it
	// takes), but a store that sends nothing for StoreTimeout is given up
	// on, so a stalled connection does not hold a slot.
	ctx, cancel := context.WithCancelCause(dl.ctx)
	defer cancel(nil)
	idle := e.cfg.StoreTimeout
	watchdog := time.AfterFunc(idle, func() { cancel(errStalled) })
	defer watchdog.Stop()
	octx, origin := store.TrackOrigin(ctx)
	rc, err := store.OpenRange(octx, e.store, t.key, lo, hi-lo)
	if err != nil {
		return fmt.Errorf("open %s at %d: %w", t.key, lo, stalled(ctx, err, s.opened))
	}
	defer rc.Close()
	e.metrics.storeRead(0, origin)
	var largest int64
	for b := s.from; b < s.last; b++ {
		l, h := dl.m.span(b)
		largest = max(largest, h-l)
	}
	buf := make([]byte, max(1<<20, largest))
	at, filled := lo, 0 // buf holds the file from at, filled bytes of it
	last := time.Now()
	for {
		dl.mu.Lock()
		next, end := s.next, s.hi
		dl.mu.Unlock()
		if next >= end {
			return nil // done, or a reader took the rest
		}
		if filled == len(buf) {
			return fmt.Errorf("%s: block %d does not fit a stream's buffer", t.key, next) // cannot happen: buf holds the largest block
		}
		n, rerr := rc.Read(buf[filled:])
		if n > 0 {
			filled += n
			last = time.Now()
			watchdog.Reset(idle)
			if !origin.Elsewhere() { // else counted where they were read (a cluster's shared read)
				e.metrics.addStoreBytes(int64(n))
			}
			dl.mu.Lock()
			if s.got == 0 {
				s.flowing = last
			}
			s.lastByte = last
			s.got += int64(n)
			dl.mu.Unlock()
		}
		// The blocks complete in buf, up to the stream's end.
		k := next
		for k < end && dl.m.starts[k+1]-at <= int64(filled) {
			k++
		}
		if k > next {
			k = dl.begin(s, k)
		}
		if k > next {
			bl, _ := dl.m.span(next)
			_, bh := dl.m.span(k - 1)
			if err := dl.deliver(s, buf[bl-at:bh-at], bl, next, k); err != nil {
				return err
			}
			copy(buf, buf[bh-at:filled])
			filled -= int(bh - at)
			at = bh
		}
		if rerr == io.EOF {
			dl.mu.Lock()
			left := s.next < s.hi
			dl.mu.Unlock()
			if left {
				return fmt.Errorf("%s: the stream from %d ended at %d: %w", t.key, lo, at+int64(filled), io.ErrUnexpectedEOF)
			}
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("download %s at byte %d: %w", t.key, at+int64(filled), stalled(ctx, rerr, last))
		}
	}
}

// begin reserves blocks [s.next, k) for stream s to write, as far as the
// stream still owns them (a reader may have lowered s.hi), and returns
// the end of those it may write.
func (dl *download) begin(s *stream, k int) int {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	k = min(k, s.hi)
	if k > s.next {
		s.next = k
	}
	return k
}

// deliver writes blocks [i, j), which b holds from offset lo: proven
// first, for a stream that proves (a reader's), else left arrived for the
// prover.
func (dl *download) deliver(s *stream, b []byte, lo int64, i, j int) error {
	if s.prove {
		k0, k1 := dl.m.unitRange(i, j)
		crcs, err := dl.prove(b, lo, k0, k1)
		if err != nil {
			return fmt.Errorf("%w: %w", errProof, err)
		}
		if err := dl.write(b, lo); err != nil {
			return err
		}
		dl.settle(i, j, blockProven, crcs)
		return nil
	}
	if err := dl.write(b, lo); err != nil {
		return err
	}
	dl.settle(i, j, blockArrived, nil)
	return nil
}

// settle moves blocks [i, j), which their claimer wrote, to state st:
// arrived, or proven (all their units, with the CRCs of the spans the
// proof computed).
func (dl *download) settle(i, j int, st blockState, crcs []spanSum) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for b := i; b < j; b++ {
		dl.owner[b] = nil
		if st == blockArrived {
			dl.state[b] = blockArrived
		}
	}
	if st == blockProven {
		k0, k1 := dl.m.unitRange(i, j)
		dl.markProven(k0, k1, crcs)
	}
	dl.failures = 0
	dl.wake()
}

// markProven records units [k0, k1) proven, with the CRCs of the spans
// among them a proof computed; a block whose last unit this proves is
// proven (download.mu held).
func (dl *download) markProven(k0, k1 int, crcs []spanSum) {
	for _, c := range crcs {
		dl.spanCRC[c.span-1] = c.crc
	}
	b := dl.m.blockOfUnit(k0)
	for k := k0; k < k1; k++ {
		for dl.m.first[b+1] <= k {
			b++
		}
		if dl.unitDone[k] {
			continue
		}
		dl.unitDone[k] = true
		if dl.left[b]--; dl.left[b] == 0 {
			dl.state[b], dl.owner[b] = blockProven, nil
			dl.proven++
			lo, hi := dl.m.span(b)
			dl.bytes += hi - lo
		}
	}
}

// release gives blocks [i, j), claimed by a reader that could not fetch
// or prove them, back (download.mu not held).
func (dl *download) release(i, j int, from blockState) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	back := blockMissing
	if from == blockProving {
		back = blockArrived
	}
	for b := i; b < j; b++ {
		if dl.state[b] == from {
			dl.state[b] = back
		}
	}
	dl.wake()
}

// stalled names the stall, with how long the store was silent, when the
// stream was cancelled for one.
func stalled(ctx context.Context, err error, since time.Time) error {
	if errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("%w for %v (--store-timeout): %v", errStalled, time.Since(since).Round(time.Second), err)
	}
	return err
}

// ensure makes the units of bytes [lo, hi) that overlap the ranges need
// (nil: all of [lo, hi)) proven, for a reader: it fetches the blocks
// holding [lo, hi) that no one fetches (one ranged read per run, several
// at once), waits for those on their way (see the comment at the top), and
// proves what it needs of those that arrived unproven: a whole block when
// it needs all that is left of it, else the units alone; or, when the
// caller provesItself (it reads chunks, and proves those it reads that are
// not proven yet: readChunk, decodeOrProve), it leaves those to it. fetched says it read some from the store
// itself. It returns
// errDownloadEnded when the download ended (the reader then reads the
// bytes through the store), and errGaveUp when a stream that has the
// bytes in hand is too slow to write them. Other errors are the store's,
// or a proof's.
func (dl *download) ensure(ctx context.Context, lo, hi int64, need [][2]int64, provesItself bool) (fetched bool, err error) {
	i, j := dl.m.covering(lo, hi)
	if need == nil {
		need = [][2]int64{{lo, hi}}
	}
	var giveUp <-chan time.Time
	impatient := false // waited the store's deadline for a stream: take its blocks
	for {
		var fetch, prove [][2]int // runs of blocks
		var units []int           // units of arrived blocks to prove alone
		dl.mu.Lock()
		if dl.err != nil {
			dl.mu.Unlock()
			return fetched, errDownloadEnded
		}
		wait, waitStream, inHand := false, false, false
		for b := i; b < j; b++ {
			switch dl.state[b] {
			case blockMissing:
				fetch = addRun(fetch, b)
			case blockArrived, blockProverProving:
				todo := dl.needed(b, need)
				switch {
				case len(todo) == 0, provesItself:
				case len(todo) == dl.left[b]:
					prove = addRun(prove, b)
				default:
					units = append(units, todo...)
				}
			case blockProving:
				if !provesItself && len(dl.needed(b, need)) > 0 {
					wait = true
				}
			case blockStreamed:
				s := dl.owner[b]
				if b >= s.next && (impatient || !dl.near(s, b)) {
					// Too far down the stream, or the stream too slow:
					// take the block, and the rest of the segment, which
					// goes back to missing.
					for x := b; x < s.hi; x++ {
						dl.state[x], dl.owner[x] = blockMissing, nil
					}
					s.hi = b
					dl.wake() // background streams may take the rest
					fetch = addRun(fetch, b)
					continue
				}
				inHand = inHand || b < s.next
				wait, waitStream = true, true
			case blockRead:
				wait = true
			}
		}
		for _, r := range fetch {
			for b := r[0]; b < r[1]; b++ {
				dl.state[b] = blockRead
			}
		}
		for _, r := range prove {
			for b := r[0]; b < r[1]; b++ {
				dl.state[b] = blockProving
			}
		}
		if len(fetch) > 0 {
			dl.cursor = j // background streams go on from here
		}
		ch := dl.changed
		dl.mu.Unlock()
		if len(fetch) == 0 && len(prove) == 0 && len(units) == 0 && !wait {
			return fetched, nil
		}
		if len(fetch) > 0 || len(prove) > 0 || len(units) > 0 {
			fetched = fetched || len(fetch) > 0
			if err := dl.work(ctx, fetch, prove); err != nil {
				return fetched, err
			}
			if err := dl.proveUnits(units); err != nil {
				return fetched, err
			}
			continue
		}
		if impatient && inHand {
			return fetched, errGaveUp
		}
		if waitStream && giveUp == nil {
			t := time.NewTimer(dl.t.env.hedge.Deadline(hi - lo))
			defer t.Stop()
			giveUp = t.C
		}
		select {
		case <-ch:
		case <-giveUp:
			impatient = true
		case <-ctx.Done():
			return fetched, Errorf(KindCanceled, ctx.Err(), "read %s", dl.t.key)
		}
	}
}

// needed returns the units of block b that overlap the byte ranges need
// and are not proven yet (download.mu held).
func (dl *download) needed(b int, need [][2]int64) []int {
	blo, bhi := dl.m.span(b)
	var ks []int
	last := -1
	for _, r := range need {
		lo, hi := max(r[0], blo), min(r[1], bhi)
		if lo >= hi {
			continue
		}
		k0, k1 := dl.m.unitsOverlapping(lo, hi)
		for k := max(k0, last+1); k < k1; k++ {
			if !dl.unitDone[k] {
				ks = append(ks, k)
			}
			last = k
		}
	}
	return ks
}

// near reports whether stream s will bring block b within about a round
// trip: b starts within what the stream receives in one (download.mu).
func (dl *download) near(s *stream, b int) bool {
	e := dl.t.env
	rtt := e.hedge.Typical(0)
	if rtt <= 0 {
		return b == s.from // nothing known yet: only the stream's first block is near
	}
	rate := e.streamRate.get()
	if rate <= 0 {
		rate = 64 << 20 // bytes a second, until a stream has been measured
	}
	ahead := rate * rtt.Seconds()
	lo, _ := dl.m.span(s.from)
	pos := lo + s.got
	switch {
	case s.got == 0:
		// Not flowing yet: it starts about a round trip after it asked.
		ahead = max(0, rate*(rtt-time.Since(s.opened)).Seconds())
	case time.Since(s.lastByte) > rtt:
		return false // stalled
	}
	start, _ := dl.m.span(b)
	return float64(start-pos) <= ahead
}

// addRun adds block b to runs, extending the last run if b follows it.
func addRun(runs [][2]int, b int) [][2]int {
	if n := len(runs); n > 0 && runs[n-1][1] == b {
		runs[n-1][1] = b + 1
		return runs
	}
	return append(runs, [2]int{b, b + 1})
}

// work reads the runs of blocks fetch (claimed as blockRead) from the
// store and proves them, and proves the runs prove (claimed as
// blockProving) from the file, several at once.
func (dl *download) work(ctx context.Context, fetch, prove [][2]int) error {
	type job struct {
		i, j  int
		fetch bool
	}
	var jobs []job
	for _, r := range fetch {
		// A long run is read in pieces of at most maxDemandRead.
		for i := r[0]; i < r[1]; {
			j := i + 1
			lo, _ := dl.m.span(i)
			for j < r[1] {
				if _, hi := dl.m.span(j); hi-lo > maxDemandRead {
					break
				}
				j++
			}
			jobs = append(jobs, job{i, j, true})
			i = j
		}
	}
	for _, r := range prove {
		jobs = append(jobs, job{r[0], r[1], false})
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for k, jb := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if jb.fetch {
				errs[k] = dl.demandRead(ctx, jb.i, jb.j)
			} else {
				errs[k] = dl.proveWritten(jb.i, jb.j)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// demandRead reads blocks [i, j), claimed as blockRead, with one ranged
// read of the store (hedged), proves them and writes them.
func (dl *download) demandRead(ctx context.Context, i, j int) error {
	t := dl.t
	e := t.env
	lo, _ := dl.m.span(i)
	_, hi := dl.m.span(j - 1)
	buf := make([]byte, hi-lo)
	rctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	rctx, origin := store.TrackOrigin(rctx)
	n, err := e.store.ReadAt(rctx, t.key, buf, lo)
	cancel()
	e.metrics.storeRead(n, origin)
	if err != nil {
		dl.release(i, j, blockRead)
		return storeErr(err, "read bytes %d to %d of %s", lo, hi, t.key)
	}
	k0, k1 := dl.m.unitRange(i, j)
	crcs, err := dl.prove(buf, lo, k0, k1)
	if err != nil {
		dl.release(i, j, blockRead)
		dl.fail(err)
		t.corruptInStore(err)
		// The corrupt unit may lie outside the bytes this reader wants
		// (a block holds others): it reads them from the store, proving
		// only its own.
		return errDownloadEnded
	}
	if err := dl.write(buf, lo); err != nil {
		dl.release(i, j, blockRead)
		dl.fail(err)
		return errDownloadEnded
	}
	dl.settle(i, j, blockProven, crcs)
	return nil
}

// proveWritten proves blocks [i, j), claimed as blockProving, from the
// download's file.
func (dl *download) proveWritten(i, j int) error {
	lo, _ := dl.m.span(i)
	_, hi := dl.m.span(j - 1)
	buf := make([]byte, hi-lo)
	if _, err := dl.f.ReadAt(buf, lo); err != nil {
		dl.release(i, j, blockProving)
		dl.fail(fmt.Errorf("read back %s: %w", dl.f.Name(), err))
		return errDownloadEnded
	}
	k0, k1 := dl.m.unitRange(i, j)
	crcs, err := dl.prove(buf, lo, k0, k1)
	if err != nil {
		dl.release(i, j, blockProving)
		dl.fail(err)
		dl.t.corruptInStore(err)
		return errDownloadEnded // as in demandRead: the reader proves its own bytes from the store
	}
	dl.settle(i, j, blockProven, crcs)
	return nil
}

// proveUnits proves units ks (indexes into dl.m.units, ascending) of
// arrived blocks from the download's file, claiming nothing: what a reader
// that needs only those units of the blocks proves.
func (dl *download) proveUnits(ks []int) error {
	for len(ks) > 0 {
		n := 1 // a run of units one after the other
		for n < len(ks) && ks[n] == ks[n-1]+1 {
			n++
		}
		k0, k1 := ks[0], ks[n-1]+1
		ks = ks[n:]
		lo, hi := int64(dl.m.units[k0].Offset), int64(dl.m.units[k1-1].End())
		buf := make([]byte, hi-lo)
		if _, err := dl.f.ReadAt(buf, lo); err != nil {
			dl.fail(fmt.Errorf("read back %s: %w", dl.f.Name(), err))
			return errDownloadEnded
		}
		crcs, err := dl.prove(buf, lo, k0, k1)
		if err != nil {
			dl.fail(err)
			return dl.t.corruptInStore(err)
		}
		dl.mu.Lock()
		dl.markProven(k0, k1, crcs)
		dl.wake()
		dl.mu.Unlock()
	}
	return nil
}

// proveArrived is the prover: it proves the blocks background streams
// wrote, the last first (readers go from the start, so they seldom meet),
// one at a time, until every block is proven or the download ends. It
// runs on a low-priority thread (background.Run), which may not run for a
// while on a busy host: a reader that needs a block it is proving takes
// the block over (and proves it too) rather than wait for it.
func (dl *download) proveArrived() {
	for dl.proveOne() {
	}
}

// proveWhenQuiet proves arrived blocks, as proveArrived does, but at the
// service's own priority and only while no reader has asked the service
// for anything for quietFor: so that a file whose readers went away is
// committed without waiting for idle cores, which a busy host may not have.
func (dl *download) proveWhenQuiet() {
	e := dl.t.env
	for {
		if since := time.Since(time.Unix(0, e.lastRead.Load())); since < quietFor {
			select {
			case <-time.After(quietFor - since):
			case <-dl.ctx.Done():
				return
			}
			continue
		}
		if !dl.proveOne() {
			return
		}
	}
}

// quietFor is how long the service must have served no read before a
// download's blocks are proven at its own priority.
const quietFor = 200 * time.Millisecond

// proveOne claims the last arrived block as prover-proving, proves it,
// and marks it proven unless a reader took it over meanwhile; it waits for
// a block to arrive if none has. It returns false once there is nothing
// left to do (every block is proven, or the download ended).
func (dl *download) proveOne() bool {
	dl.mu.Lock()
	for {
		if dl.err != nil || dl.proven == len(dl.state) {
			dl.mu.Unlock()
			return false
		}
		b := len(dl.state) - 1
		for b >= 0 && dl.state[b] != blockArrived {
			b--
		}
		if b >= 0 {
			dl.state[b] = blockProverProving
			dl.mu.Unlock()
			return dl.proveClaimed(b)
		}
		ch := dl.changed
		dl.mu.Unlock()
		select {
		case <-ch:
		case <-dl.ctx.Done():
			return false
		}
		dl.mu.Lock()
	}
}

// proveClaimed proves block b, claimed as prover-proving.
func (dl *download) proveClaimed(b int) bool {
	lo, hi := dl.m.span(b)
	buf := make([]byte, hi-lo)
	if _, err := dl.f.ReadAt(buf, lo); err != nil {
		dl.fail(fmt.Errorf("read back %s: %w", dl.f.Name(), err))
		return false
	}
	k0, k1 := dl.m.unitRange(b, b+1)
	crcs, err := dl.prove(buf, lo, k0, k1)
	if err != nil {
		dl.fail(err)
		dl.t.corruptInStore(err)
		return false
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.markProven(k0, k1, crcs) // a reader that took it over meanwhile finds it done
	dl.wake()
	return true
}
