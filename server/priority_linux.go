package server

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// inBackground runs fn on an OS thread of its own at the lowest CPU
// priority (nice 19), and waits for it: work that may take the cores for a
// second or more (hashing a whole downloaded file) then yields them to the
// reads it would slow down. The thread is never unlocked, so it exits with
// fn's goroutine rather than going back to the runtime reniced. Where the
// priority cannot be set, fn runs at the process's own.
func inBackground(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: reniced, it would show the whole process
			// at nice 19, and a locked goroutine that exits on it wedges
			// it rather than ending it. Hold it, so fn runs on another.
			inBackground(fn)
			runtime.UnlockOSThread()
			return
		}
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
		fn()
	}()
	<-done
}
