//go:build !unix

package client

import "net"

// blocking returns nc: blocking calls on the caller's thread are for
// unix (blocking_unix.go).
func blocking(nc net.Conn) net.Conn { return nc }
