//go:build !unix

package server

// pending reports true: without a way to peek, HTTP1 does not poll.
func pending(fd uintptr) bool { return true }
