package cache

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// inBackground runs fn on an OS thread of its own at the lowest CPU
// priority, and waits for it: work that may take the cores for a second or
// more (hashing a whole downloaded file) then yields them to the reads it
// would slow down.
//
// The thread runs under SCHED_IDLE: a thread of normal priority that wakes
// takes the core from it at once, where under nice 19 alone the scheduler
// lets it run out its slice first, milliseconds on every request of a
// read's ping-pong between client and service (a cold seed join took
// 1.08-1.22 s against 1.22-1.27 s at nice 19, interleaved). SCHED_IDLE
// runs only on a core nothing else wants, so on a host kept busy it could
// wait forever: after idleFor the thread goes to nice 19, which has a
// share however busy the cores are. Where SCHED_IDLE is refused it runs at
// nice 19 throughout; where no priority can be set, at the process's own.
//
// The thread is never unlocked, so it exits with fn's goroutine rather
// than going back to the runtime at that priority.
func inBackground(fn func()) {
	inBackgroundFor(fn, idleFor)
}

// idleFor is how long inBackground's thread stays under SCHED_IDLE.
const idleFor = 10 * time.Second

func inBackgroundFor(fn func(), idle time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		tid := unix.Gettid()
		if tid == unix.Getpid() {
			// The main thread: lowered, it would show the whole process
			// in the background, and a locked goroutine that exits on it
			// wedges it rather than ending it. Hold it, so fn runs on
			// another.
			inBackgroundFor(fn, idle)
			runtime.UnlockOSThread()
			return
		}
		if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
			_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
			fn()
			return
		}
		// After idle, nice 19 under the normal policy, unless fn is done
		// (then the thread may be gone, and its id another's).
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
