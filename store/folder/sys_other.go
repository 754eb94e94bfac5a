//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package folder

import "os"

// On this platform there is no flock: only goroutines of one process
// exclude each other, not separate processes.

func tryLockFile(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) {}
