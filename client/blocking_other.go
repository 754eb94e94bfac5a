//go:build !unix

package client

import (
	"net"

	"github.com/chunkd/chunkd/internal/spin"
)

// blocking returns nc: blocking calls on the caller's thread are for
// unix (blocking_unix.go).
func blocking(nc net.Conn, _ *spin.Policy) net.Conn { return nc }
