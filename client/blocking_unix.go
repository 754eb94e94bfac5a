//go:build unix

package client

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/internal/spin"
)

// blockingConn is a lean connection read and written with blocking
// system calls on the caller's thread, not through Go's network poller.
//
// A page read waits for its answer on a thread locked by the cgo
// callback from SQLite; through the poller, the answer's arrival wakes
// the thread that polls, which hands the goroutine back to its locked
// thread: two wake-ups where a blocked read(2) has one. On this project's
// 2-core VM a 16 KiB round trip to another process took 34–41 µs with
// blocking calls against 58–66 µs through the poller (the same
// hand-written client, its goroutine not even locked).
//
// A deadline is the socket's SO_RCVTIMEO and SO_SNDTIMEO, set to what is
// left of it before each call; a deadline in the past (how a cancel ends
// a blocked exchange) shuts the socket down, which ends a blocked call at
// once. The connection is not used after either.
type blockingConn struct {
	net.Conn // for its addresses; its own descriptor is closed
	// spin polls for an answer before a read blocks (package spin: a
	// blocked read on a VM costs a wake-up through the hypervisor).
	spin *spin.Policy

	mu       sync.Mutex // guards what follows against a cancel or Close in another goroutine
	fd       int
	calls    int  // calls in progress on fd: it is closed after the last
	closed   bool // Close was called
	deadline time.Time
	rcvTimed bool // SO_RCVTIMEO holds a timeout
	sndTimed bool // SO_SNDTIMEO holds a timeout
}

// blocking returns nc as a blockingConn whose reads poll as sp says, or
// nc itself when it is not a TCP connection or its descriptor cannot be
// taken.
func blocking(nc net.Conn, sp *spin.Policy) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	fd := -1
	var dupErr error
	err = rc.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if fd, dupErr = syscall.Dup(int(s)); dupErr == nil {
			syscall.CloseOnExec(fd)
		}
	})
	if err != nil || dupErr != nil {
		return nc
	}
	// O_NONBLOCK belongs to the open file both descriptors share: clear
	// it once the poller's descriptor is closed.
	nc.Close()
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nc // closed: its first use fails, and the caller dials again
	}
	return &blockingConn{Conn: nc, fd: fd, spin: sp}
}

func (c *blockingConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		deadline, err := c.begin(syscall.SO_RCVTIMEO)
		if err != nil {
			return 0, err
		}
		n, err := c.read(p, deadline)
		c.end()
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, os.ErrDeadlineExceeded
		case err != nil:
			return 0, c.opError("read", err)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// read reads into p once begin has set the call's timeout for deadline:
// it polls for the bytes first as c.spin says (up to the deadline), then
// blocks.
func (c *blockingConn) read(p []byte, deadline time.Time) (n int, err error) {
	if c.spin.Off() {
		return syscall.Read(c.fd, p)
	}
	var limit time.Duration
	if !deadline.IsZero() {
		if limit = time.Until(deadline); limit <= 0 {
			return 0, syscall.EAGAIN // as a timed-out read says
		}
	}
	if c.spin.WaitFor(limit, func() bool {
		n, _, err = syscall.Recvfrom(c.fd, p, syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	}) {
		return n, err
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return 0, syscall.EAGAIN
	}
	return syscall.Read(c.fd, p)
}

func (c *blockingConn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		if _, err := c.begin(syscall.SO_SNDTIMEO); err != nil {
			return done, err
		}
		n, err := syscall.Write(c.fd, p[done:])
		c.end()
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return done, os.ErrDeadlineExceeded
		case err != nil:
			return done, c.opError("write", err)
		}
		done += n
	}
	return done, nil
}

// begin starts a call: it sets the socket's timeout for the call (opt)
// to what is left of the deadline, and returns the deadline.
func (c *blockingConn) begin(opt int) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return time.Time{}, net.ErrClosed
	}
	var tv syscall.Timeval // zero: no timeout
	if !c.deadline.IsZero() {
		left := time.Until(c.deadline)
		if left <= 0 {
			return time.Time{}, os.ErrDeadlineExceeded
		}
		if tv = syscall.NsecToTimeval(left.Nanoseconds()); tv.Sec == 0 && tv.Usec == 0 {
			tv.Usec = 1
		}
	}
	timed := &c.rcvTimed // each option keeps its own timeout until set again
	if opt == syscall.SO_SNDTIMEO {
		timed = &c.sndTimed
	}
	if *timed || !c.deadline.IsZero() {
		if err := syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
			return time.Time{}, c.opError("setsockopt", err)
		}
		*timed = !c.deadline.IsZero()
	}
	c.calls++
	return c.deadline, nil
}

// end ends a call; the descriptor closes after the last call once Close
// was called.
func (c *blockingConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls--; c.closed && c.calls == 0 {
		syscall.Close(c.fd)
	}
}

func (c *blockingConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// SetDeadline bounds the calls to come; a time in the past also ends a
// call blocked now, and the connection with it.
func (c *blockingConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.deadline = t
	if !t.IsZero() && !t.After(time.Now()) {
		syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	}
	return nil
}

func (c *blockingConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *blockingConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }

// Close ends a call blocked in another goroutine and closes the
// descriptor, at once or after that call.
func (c *blockingConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.closed = true
	syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	if c.calls == 0 {
		return syscall.Close(c.fd)
	}
	return nil
}
