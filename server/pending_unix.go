//go:build unix

package server

import "syscall"

// pending reports whether the socket fd has bytes to read, or has ended
// (so that a read would not block).
func pending(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN
}
