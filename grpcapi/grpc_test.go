package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestGRPC(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 20, Files: 2}, cache.Config{})
	conn := grpcFixture(t, f, 0)
	cc := chunkpb.NewChunkCacheClient(conn)
	ctx := context.Background()
	file := f.DB.Files[0]

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: chunkpb.ChunkCache_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}

	r, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: file.Addrs[3][:]})
	if err != nil || !r.Found || !bytes.Equal(r.Contents, f.DB.Chunks[file.Addrs[3]]) {
		t.Fatalf("GetChunk: found %v, err %v", r.GetFound(), err)
	}
	absent := addr.Of([]byte("absent"))
	if r, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: absent[:]}); err != nil || r.Found {
		t.Fatalf("absent chunk: found %v, err %v", r.GetFound(), err)
	}
	var raw [][]byte
	for _, a := range file.Addrs {
		raw = append(raw, a[:])
	}
	stream, err := cc.GetChunks(ctx, &chunkpb.GetChunksRequest{Db: "db1", Addresses: raw})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for {
		rep, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Found || !bytes.Equal(rep.Contents, f.DB.Chunks[file.Addrs[rep.Index]]) {
			t.Fatalf("GetChunks reply %d wrong", rep.Index)
		}
		seen++
	}
	if seen != len(raw) {
		t.Fatalf("GetChunks: %d replies for %d addresses", seen, len(raw))
	}
	has, err := cc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "db1", Addresses: [][]byte{file.Addrs[0][:], absent[:]}})
	if err != nil || len(has.Present) != 2 || !has.Present[0] || has.Present[1] {
		t.Fatalf("HasChunks: %v, %v", has.GetPresent(), err)
	}

	// Bad input: each a status with a message that names the problem.
	tooMany := make([][]byte, api.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = file.Addrs[0][:]
	}
	huge := make([][]byte, 20*api.MaxBatch) // well past the request size limit
	for i := range huge {
		huge[i] = file.Addrs[0][:]
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"short address", func() error {
			_, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: []byte("short")})
			return err
		}, codes.InvalidArgument, "bad address"},
		{"unknown database", func() error {
			_, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "nosuch", Address: absent[:]})
			return err
		}, codes.NotFound, "nosuch"},
		{"path traversal", func() error {
			_, err := cc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "../db1", Addresses: raw[:1]})
			return err
		}, codes.InvalidArgument, "../db1"},
		{"batch over the limit", func() error {
			_, err := cc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "db1", Addresses: tooMany})
			return err
		}, codes.ResourceExhausted, "exceeds the limit"},
		{"request over the size limit", func() error {
			_, err := cc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "db1", Addresses: huge})
			return err
		}, codes.ResourceExhausted, "larger than max"},
		{"streamed batch over the limit", func() error {
			s, err := cc.GetChunks(ctx, &chunkpb.GetChunksRequest{Db: "db1", Addresses: tooMany})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.ResourceExhausted, "exceeds the limit"},
	} {
		err := tc.call()
		st, _ := status.FromError(err)
		if st.Code() != tc.code || !bytes.Contains([]byte(st.Message()), []byte(tc.msg)) {
			t.Errorf("%s: %v, want %v with %q", tc.name, err, tc.code, tc.msg)
		}
	}
	// Both are counted as too large: the batch over the limit (the
	// handler's, by the kinds table) and the request refused for its size,
	// which never reached a handler.
	if n := f.Rejected("grpc_has_chunks", "too large"); n != 2 {
		t.Errorf("rejected oversized requests = %v, want 2", n)
	}
	if n := f.Requests("grpc_has_chunks", "ResourceExhausted"); n != 2 {
		t.Errorf("requests counted with ResourceExhausted = %v, want 2", n)
	}

	// The store is gone: a chunk of the file never read (not on disk) is
	// Unavailable; one on disk is still served.
	f.WaitCached(f.DB.Files[0])
	f.Store.Down.Store(true)
	_, err = cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: f.DB.Files[1].Addrs[0][:]})
	if status.Code(err) != codes.Unavailable || !bytes.Contains([]byte(err.Error()), []byte("unreachable")) {
		t.Errorf("store down: %v, want Unavailable saying unreachable", err)
	}
	if r, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: file.Addrs[9][:]}); err != nil || !r.Found {
		t.Errorf("store down, chunk on disk: found %v, %v", r.GetFound(), err)
	}
}
