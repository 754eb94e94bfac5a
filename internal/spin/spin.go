// Package spin bounds busy-waiting for a socket's next bytes.
//
// On a virtual machine a thread that blocks in a read lets its virtual
// CPU halt, and the bytes' arrival must wake it again through the
// hypervisor: on this project's 2-core VM that costs about 20 µs on each
// side of a loopback round trip, more than the request itself (a 4 KiB
// round trip between two processes: 56–75 µs with both sides blocking,
// 14–24 µs with both polling first). A reader that expects an answer soon
// does better to poll for it first, as Go's scheduler spins before it
// parks a thread and as Linux's haltpoll does for an idle CPU (off on
// that VM).
//
// Polling costs a CPU, so it is only worth it on a CPU that would
// otherwise be idle. A Policy polls only while the waiter is the only
// work in progress it knows of (its waits count themselves while they
// poll; Begin and End count other work, such as the requests a server is
// answering), for at most Max; between polls the waiter yields its CPU
// (sched_yield), and once a yield ran another thread, the CPUs are busy
// and the poll stops. After a run of polls that found nothing (a client
// busy elsewhere, a slow answer), the next waits do not poll for a while.
package spin

import (
	"sync/atomic"
	"time"
)

// DefaultMax is how long a wait polls when its Policy's Max is 0: on the
// development VM, title5's one-thread transactions through the service
// ran at 472 tps without polling and at 527–625 with 50 µs, 866–1,059
// with 200 µs, 952–971 with 500 µs.
const DefaultMax = 200 * time.Microsecond

const (
	failRun = 4  // polls in a row that found nothing: stop polling...
	skipFor = 32 // ...for this many waits
)

// busyYield is how long a yield takes when it ran another thread: one
// that only returns takes about a microsecond. (A variable for tests.)
var busyYield = 10 * time.Microsecond

// MaxMax bounds Max: a longer poll is never worth its CPU.
const MaxMax = 10 * time.Millisecond

// Policy decides whether and how long a wait polls. The zero Policy
// polls for DefaultMax; a negative Max, or a nil Policy, never polls; a
// Max over MaxMax polls for MaxMax. A Policy is safe for use by many
// goroutines at once.
type Policy struct {
	Max time.Duration

	work  atomic.Int32 // Begin minus End
	fails atomic.Int32 // polls in a row that found nothing
	skip  atomic.Int32 // waits left that do not poll
	stats Stats
}

// Stats counts what a Policy's waits did.
type Stats struct {
	Ready   atomic.Int64 // polls that found the bytes
	Expired atomic.Int64 // polls that ran for Max and found nothing
	Skipped atomic.Int64 // waits that did not poll: other work in progress, a run of expiries
	Busy    atomic.Int64 // polls ended by other work: another thread wanted the CPU, or Begin was called
}

// Stats returns p's counters.
func (p *Policy) Stats() *Stats { return &p.stats }

// Begin counts one more piece of work in progress, other than waits
// (a request being answered, say); End counts it done. A wait counts
// itself while it polls, and polls only while it is the only work.
func (p *Policy) Begin() {
	if p != nil {
		p.work.Add(1)
	}
}

// End counts a piece of work begun with Begin done.
func (p *Policy) End() {
	if p != nil {
		p.work.Add(-1)
	}
}

// Off reports whether p never polls.
func (p *Policy) Off() bool { return p == nil || p.Max < 0 }

// Work returns the work in progress: Begin's calls less End's.
func (p *Policy) Work() int { return int(p.work.Load()) }

// Wait calls ready until it returns true, Max has passed, or other work
// is in progress, and reports whether ready returned true. It returns
// false at once, without calling ready, when p does not poll now; the
// caller then blocks as it would have. ready must not block.
func (p *Policy) Wait(ready func() bool) bool { return p.WaitFor(0, ready) }

// WaitFor is Wait polling for at most limit too (0: no limit), say until
// the caller's deadline.
func (p *Policy) WaitFor(limit time.Duration, ready func() bool) bool {
	if p.Off() {
		return false
	}
	d := p.Max
	if d == 0 {
		d = DefaultMax
	}
	d = min(d, MaxMax)
	if limit > 0 {
		d = min(d, limit)
	}
	defer p.work.Add(-1)
	if p.work.Add(1) > 1 {
		p.stats.Skipped.Add(1)
		return false
	}
	if p.skip.Load() > 0 {
		p.skip.Add(-1)
		p.stats.Skipped.Add(1)
		return false
	}
	start := time.Now()
	for busy := false; ; {
		if ready() {
			p.fails.Store(0)
			p.stats.Ready.Add(1)
			return true
		}
		if busy || p.work.Load() > 1 {
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
