package grpcapi

import (
	"net"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/cachetest"
	"github.com/chunkd/chunkd/internal/testdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newFixture is a cache over database db1 (package cachetest).
func newFixture(t testing.TB, o testdb.Options, cfg cache.Config) *cachetest.Fixture {
	t.Helper()
	return cachetest.New(t, o, cfg)
}

// grpcFixture serves a fixture's cache over gRPC on loopback, a streamed
// answer waiting at most timeout for the client (0: the default).
func grpcFixture(t *testing.T, f *cachetest.Fixture, timeout time.Duration) *grpc.ClientConn {
	t.Helper()
	return serveGRPC(t, f, ChunkCache(f.Cache, timeout))
}

// serveGRPC serves services over gRPC on loopback, its metrics in f's
// registry, and returns a client's connection.
func serveGRPC(t *testing.T, f *cachetest.Fixture, services ...Service) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Registry: f.Registry}, services...)
	go s.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(api.MaxGRPCMessage), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Stop()
	})
	return conn
}
