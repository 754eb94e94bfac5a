//go:build !unix

package httpapi

import (
	"net"

	"github.com/chunkd/chunkd/internal/spin"
)

// poller does nothing without a way to peek at a socket.
type poller struct{}

func newPoller(net.Conn) poller { return poller{} }

func (poller) poll(*spin.Policy) {}
