// Package testnet holds the loopback addresses tests use to see how a
// client copes with a peer that is not there or does not answer.
package testnet

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Refused returns a loopback address (host:port) nothing listens on: a
// connection to it is refused.
func Refused(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := lis.Addr().String()
	lis.Close()
	return a
}

// Silent returns a loopback address (host:port) that accepts connections,
// reads what is sent, and never answers. Its listener and connections are
// closed when the test ends.
func Silent(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			} else {
				conns = append(conns, c)
			}
			mu.Unlock()
			go io.Copy(io.Discard, c) //nolint:errcheck // ends when the connection closes
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}
