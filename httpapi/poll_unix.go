//go:build unix

package httpapi

import (
	"net"
	"syscall"

	"github.com/chunkd/chunkd/internal/spin"
)

// poller polls a connection's socket for its next bytes.
type poller struct{ raw syscall.RawConn } // nil: not a socket; poll does nothing

func newPoller(nc net.Conn) poller {
	var p poller
	if sc, ok := nc.(syscall.Conn); ok {
		p.raw, _ = sc.SyscallConn()
	}
	return p
}

// poll polls the socket as sp says; it returns when bytes came or
// polling ended, and never reads them.
func (p poller) poll(sp *spin.Policy) {
	if p.raw == nil || sp.Off() {
		return
	}
	p.raw.Read(func(fd uintptr) bool { //nolint:errcheck // a failed poll ends in the caller's read
		sp.Wait(func() bool { return pending(fd) })
		return true
	})
}

// pending reports whether the socket fd has bytes to read, or has ended
// (so that a read would not block).
func pending(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN
}
