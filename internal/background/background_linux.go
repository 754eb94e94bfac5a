//go:build linux

package background

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// idleFor is how long Run's thread stays under SCHED_IDLE.
const idleFor = 10 * time.Second

// Run runs fn on an OS thread of its own under SCHED_IDLE, and waits for
// it: a thread of normal priority that wakes takes the core from it at
// once, where under nice 19 alone the scheduler lets it run out its slice
// first, milliseconds on every request of a read's ping-pong between
// client and service (a cold seed join took 1.08-1.22 s against
// 1.22-1.27 s at nice 19, interleaved). SCHED_IDLE runs only on a core
// nothing else wants, so on a host kept busy it could wait forever: after
// 10 s the thread goes to nice 19, which has a share however busy the
// cores are. Where SCHED_IDLE is refused it runs at nice 19; where no
// priority can be set, at the process's own. Only fn's own thread is
// lowered: goroutines it starts run as usual.
func Run(fn func()) { runFor(fn, idleFor) }

// runFor is Run with the thread under SCHED_IDLE for idle, not 10 s.
func runFor(fn func(), idle time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tid := unix.Gettid()
		if tid == unix.Getpid() {
			// The main thread: lowered, it would show the whole process
			// in the background. Hold it, so fn runs on another.
			runFor(fn, idle)
			runtime.UnlockOSThread()
			return
		}
		if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
			_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
			fn()
			return
		}
		var mu sync.Mutex
		finished := false
		raise := time.AfterFunc(idle, func() {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: 19}, 0)
			}
		})
		fn()
		raise.Stop()
		mu.Lock()
		finished = true
		mu.Unlock()
	}()
	<-done
}
