//go:build unix

package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/chunkd/chunkd/internal/spin"
)

// dialBlocking returns a blockingConn to a loopback listener and the
// server's side of it.
func dialBlocking(t *testing.T) (*blockingConn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	// Polling as a client's reads do, for as long as it may: every test
	// here covers a read that polls, then blocks.
	bc, ok := blocking(nc, &spin.Policy{Max: spin.MaxMax}).(*blockingConn)
	if !ok {
		t.Fatal("a TCP connection did not become a blockingConn")
	}
	t.Cleanup(func() { bc.Close() })
	return bc, peer
}

// TestBlockingConn: bytes both ways, the peer's close as io.EOF, a
// deadline as os.ErrDeadlineExceeded, and a call blocked in one
// goroutine ended by a deadline in the past or a Close in another.
func TestBlockingConn(t *testing.T) {
	bc, peer := dialBlocking(t)
	if _, err := bc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	peer.Write([]byte("pong"))
	if _, err := io.ReadFull(bc, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q, %v", buf, err)
	}

	bc.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := bc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	bc.SetDeadline(time.Time{})
	peer.Write([]byte("more"))
	if _, err := io.ReadFull(bc, buf); err != nil || string(buf) != "more" {
		t.Fatalf("read after the deadline was cleared: %q, %v", buf, err)
	}
	peer.Close()
	if _, err := bc.Read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %v, want io.EOF", err)
	}

	for name, end := range map[string]func(*blockingConn){
		"a deadline in the past": func(c *blockingConn) { c.SetDeadline(aLongTimeAgo) },
		"Close":                  func(c *blockingConn) { c.Close() },
	} {
		bc, _ := dialBlocking(t)
		done := make(chan error, 1)
		go func() {
			_, err := bc.Read(make([]byte, 1))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // let it block
		end(bc)
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: the blocked read returned no error", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not end a blocked read", name)
		}
		if _, err := bc.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: the connection still reads", name)
		}
	}
}

// TestLeanBlocking: the lean path's connections use blocking calls,
// unless CHUNKD_LEAN_HTTP=poll.
func TestLeanBlocking(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string { return ok("x", "memory") })
	for env, want := range map[string]bool{"": true, "poll": false} {
		t.Setenv(leanEnv, env)
		h := s.service(t, "")
		if r, err := h.get(context.Background(), testAddr); err != nil || string(r.data) != "x" {
			t.Fatalf("get: %+v, %v", r, err)
		}
		h.lean.mu.Lock()
		_, got := h.lean.idle[0].nc.(*blockingConn)
		h.lean.mu.Unlock()
		if got != want {
			t.Errorf("CHUNKD_LEAN_HTTP=%q: blocking %v, want %v", env, got, want)
		}
	}
}

// TestLeanBlockingBounded: a client holds at most leanBlockingMax
// connections on blocking calls (a thread each while in use); the rest
// use the poller, and a blocking one closed makes room for another.
func TestLeanBlockingBounded(t *testing.T) {
	s := startRaw(t, func(int, *http.Request) string { return ok("x", "memory") })
	h := s.service(t, "")
	ctx := context.Background()
	var conns []*leanConn
	count := func() (n int) {
		for _, lc := range conns {
			if _, ok := lc.nc.(*blockingConn); ok {
				n++
			}
		}
		return n
	}
	for range leanBlockingMax + 6 {
		lc, err := h.lean.conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, lc)
	}
	if n := count(); n != leanBlockingMax {
		t.Fatalf("%d connections on blocking calls of %d, want %d", n, len(conns), leanBlockingMax)
	}
	conns[0].close()
	conns = conns[1:]
	lc, err := h.lean.conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, lc)
	if _, ok := lc.nc.(*blockingConn); !ok || count() != leanBlockingMax {
		t.Errorf("after one closed: the new one blocking %v, %d in all", ok, count())
	}
	for _, lc := range conns {
		lc.close()
	}
	if n := h.lean.blocking.Load(); n != 0 {
		t.Errorf("%d counted after all closed", n)
	}
}

// TestBlockingConnDeadlineCleared: once a deadline is cleared, no call
// keeps a timeout left from it (the write and the read each had one).
func TestBlockingConnDeadlineCleared(t *testing.T) {
	bc, peer := dialBlocking(t)
	buf := make([]byte, 4)
	bc.SetDeadline(time.Now().Add(100 * time.Millisecond))
	bc.Write([]byte("req1"))
	io.ReadFull(peer, buf)
	peer.Write([]byte("ans1"))
	if _, err := io.ReadFull(bc, buf); err != nil {
		t.Fatal(err)
	}
	bc.SetDeadline(time.Time{})
	bc.Write([]byte("req2"))
	io.ReadFull(peer, buf)
	go func() {
		time.Sleep(300 * time.Millisecond) // past what was left of the old deadline
		peer.Write([]byte("ans2"))
	}()
	if _, err := io.ReadFull(bc, buf); err != nil || string(buf) != "ans2" {
		t.Fatalf("read without a deadline: %q, %v", buf, err)
	}
}
