//go:build !linux

package cache

// inBackground runs fn (at the process's priority: lowering one thread's
// is done on Linux only).
func inBackground(fn func()) { fn() }
