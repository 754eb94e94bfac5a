// Package spin bounds busy-waiting for a socket's next bytes.
//
// On a virtual machine a thread that blocks in a read lets its virtual
// CPU halt, and the bytes' arrival must wake it again through the
// hypervisor: on this project's 2-core VM that costs about 20 µs on each
// side of a loopback round trip, more than the request itself (a 4 KiB
// round trip between two processes: 56–75 µs with both sides blocking,
// 14–24 µs with both polling for up to 20–50 µs first). A reader that
// expects an answer within tens of microseconds does better to poll for
// it that long first, as Go's scheduler spins before it parks a thread
// and as Linux's haltpoll does for an idle CPU (off on that VM).
//
// Polling costs a CPU, so a Policy bounds it four ways: each wait polls
// for at most Max; at most one waiter per two CPUs polls at a time; after
// a run of waits whose bytes did not come within Max (a client busy
// elsewhere, a slow answer), the next waits do not poll at all for a
// while; and between polls the waiter yields its CPU (sched_yield), so
// that another runnable thread on it runs first, and once another did
// (the yield took long) the CPUs are busy and the wait stops polling.
package spin

import (
	"runtime"
	"sync/atomic"
	"time"
)

// DefaultMax is how long a wait polls when its Policy's Max is 0.
const DefaultMax = 50 * time.Microsecond

const (
	failRun = 4  // waits in a row that found nothing: stop polling...
	skipFor = 32 // ...for this many waits
)

// busyYield is how long a yield takes when it ran another thread: one
// that only returns takes about a microsecond. (A variable for tests.)
var busyYield = 10 * time.Microsecond

// Policy decides whether and how long a wait polls. The zero Policy
// polls for DefaultMax; a negative Max, or a nil Policy, never polls. A
// Policy is safe for use by many goroutines at once.
type Policy struct {
	Max time.Duration

	active atomic.Int32 // waiters polling now
	fails  atomic.Int32 // waits in a row whose poll found nothing
	skip   atomic.Int32 // waits left that do not poll
	stats  Stats
}

// Stats counts what a Policy's waits did.
type Stats struct {
	Ready   atomic.Int64 // polls that found the bytes
	Expired atomic.Int64 // polls that ran for Max and found nothing
	Skipped atomic.Int64 // waits that did not poll (other pollers, a run of expiries)
	Busy    atomic.Int64 // polls ended because another thread wanted the CPU
}

// Stats returns p's counters.
func (p *Policy) Stats() *Stats { return &p.stats }

// limit is how many waiters of one process poll at once: one per two
// CPUs, so that what is waited for has a CPU to run on.
var limit = int32(max(1, runtime.NumCPU()/2))

// Wait calls ready until it returns true or p's Max has passed, and
// reports whether it returned true. It returns false at once, without
// calling ready, when p does not poll now; the caller then blocks as it
// would have. ready must not block.
func (p *Policy) Wait(ready func() bool) bool {
	if p == nil {
		return false
	}
	d := p.Max
	if d == 0 {
		d = DefaultMax
	}
	if d < 0 {
		return false
	}
	if p.skip.Load() > 0 {
		p.skip.Add(-1)
		p.stats.Skipped.Add(1)
		return false
	}
	if p.active.Add(1) > limit {
		p.active.Add(-1)
		p.stats.Skipped.Add(1)
		return false
	}
	defer p.active.Add(-1)
	start := time.Now()
	for busy := false; ; {
		if ready() {
			p.fails.Store(0)
			p.stats.Ready.Add(1)
			return true
		}
		if busy {
			p.stats.Busy.Add(1)
			return false
		}
		now := time.Now()
		if now.Sub(start) >= d {
			break
		}
		yield()
		busy = time.Since(now) >= busyYield
	}
	p.stats.Expired.Add(1)
	if p.fails.Add(1) >= failRun {
		p.fails.Store(0)
		p.skip.Store(skipFor)
	}
	return false
}
