//go:build chunkd_nogrpc

package client

import (
	"crypto/tls"
	"fmt"
	"net/url"
)

// newGRPCService: a build with the chunkd_nogrpc tag (the SQLite
// extension) has no gRPC transport.
func newGRPCService(u *url.URL, _ string, _ *tls.Config, _ string) (service, error) {
	return nil, fmt.Errorf("client: service address %s: this build reads cache services over HTTP only (it was built with the chunkd_nogrpc tag, as the SQLite extension is): use http:// or https://", u.Redacted())
}
