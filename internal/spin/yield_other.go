//go:build !linux

package spin

import "runtime"

// yield lets other goroutines run.
func yield() { runtime.Gosched() }
