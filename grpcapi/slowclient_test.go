package grpcapi

import (
	"context"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
)

// A client that stops reading a streamed answer is cut off after the
// client timeout, and holds no cached file meanwhile.

const slowTimeout = 300 * time.Millisecond

// TestStalledGRPCStream: a gRPC client that stops receiving a streamed
// batch is cut off after ClientTimeout (DeadlineExceeded), and pins
// nothing meanwhile.
func TestStalledGRPCStream(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 300, ChunkSize: 64 << 10}, cache.Config{MemBytes: 1})
	f.Get(f.DB.Files[0].Addrs[0])
	f.WaitCached()
	conn := grpcFixture(t, f, slowTimeout)
	var as [][]byte
	for _, a := range f.DB.Files[0].Addrs {
		as = append(as, a[:])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := chunkpb.NewChunkCacheClient(conn).GetChunks(ctx, &chunkpb.GetChunksRequest{Db: "db1", Addresses: as})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // one, then stop reading
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for f.Requests("grpc_get_chunks", "DeadlineExceeded") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled stream was never cut off")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := f.Cache.FilesInUse(); n != 0 {
		t.Fatalf("%d readers hold the file after the stream was cut", n)
	}
}
