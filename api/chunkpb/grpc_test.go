package chunkpb_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
)

// fakeCache is a ChunkCache over a map, holding one database "db".
type fakeCache struct {
	chunkpb.UnimplementedChunkCacheServer
	chunks map[addr.Addr][]byte
}

func (c *fakeCache) lookup(db string, address []byte) (data []byte, found bool, err error) {
	if db != "db" {
		return nil, false, status.Errorf(codes.NotFound, "database %q not found", db)
	}
	a, err := addr.FromBytes(address)
	if err != nil {
		return nil, false, status.Error(codes.InvalidArgument, err.Error())
	}
	data, found = c.chunks[a]
	return data, found, nil
}

func (c *fakeCache) GetChunk(_ context.Context, req *chunkpb.GetChunkRequest) (*chunkpb.GetChunkResponse, error) {
	data, found, err := c.lookup(req.GetDb(), req.GetAddress())
	if err != nil || !found {
		return &chunkpb.GetChunkResponse{}, err
	}
	return &chunkpb.GetChunkResponse{Found: true, Contents: data, Tier: api.TierMemory.Proto()}, nil
}

func (c *fakeCache) GetChunks(req *chunkpb.GetChunksRequest, stream grpc.ServerStreamingServer[chunkpb.ChunkReply]) error {
	// Answer backwards, to show the client copes with any order.
	as := req.GetAddresses()
	for i := len(as) - 1; i >= 0; i-- {
		data, found, err := c.lookup(req.GetDb(), as[i])
		if err != nil {
			return err
		}
		r := &chunkpb.ChunkReply{Index: uint32(i), Address: as[i], Found: found, Contents: data}
		if found {
			r.Tier = api.TierDisk.Proto()
		}
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return nil
}

func (c *fakeCache) HasChunks(_ context.Context, req *chunkpb.HasChunksRequest) (*chunkpb.HasChunksResponse, error) {
	resp := &chunkpb.HasChunksResponse{}
	for _, a := range req.GetAddresses() {
		_, found, err := c.lookup(req.GetDb(), a)
		if err != nil {
			return nil, err
		}
		resp.Present = append(resp.Present, found)
	}
	return resp, nil
}

func TestChunkCacheOverBufconn(t *testing.T) {
	// The second chunk is above gRPC's default 4 MiB message limit.
	present := [][]byte{[]byte("first chunk"), bytes.Repeat([]byte("big"), 2<<20), {}}
	cache := &fakeCache{chunks: map[addr.Addr][]byte{}}
	for _, d := range present {
		cache.chunks[addr.Of(d)] = d
	}
	absent := addr.Of([]byte("not there"))

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(api.MaxGRPCMessage), grpc.MaxSendMsgSize(api.MaxGRPCMessage))
	chunkpb.RegisterChunkCacheServer(srv, cache)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(api.MaxGRPCMessage)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := chunkpb.NewChunkCacheClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// GetChunk: found (small and large), not found, unknown database, bad
	// address.
	a1 := addr.Of(present[1])
	got, err := client.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db", Address: a1[:]})
	if err != nil || !got.GetFound() || !bytes.Equal(got.GetContents(), present[1]) {
		t.Fatalf("GetChunk of %d bytes: found %v, %v", len(present[1]), got.GetFound(), err)
	}
	a0 := addr.Of(present[0])
	got, err = client.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db", Address: a0[:]})
	if err != nil || !got.GetFound() || !bytes.Equal(got.GetContents(), present[0]) || api.TierFromProto(got.GetTier()) != api.TierMemory {
		t.Fatalf("GetChunk found: %v, %v", got, err)
	}
	got, err = client.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db", Address: absent[:]})
	if err != nil || got.GetFound() || len(got.GetContents()) != 0 || got.GetTier() != chunkpb.Tier_TIER_UNSPECIFIED {
		t.Fatalf("GetChunk absent: %v, %v", got, err)
	}
	if _, err := client.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "other", Address: a0[:]}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetChunk unknown db: %v", err)
	}
	if _, err := client.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db", Address: a0[:5]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetChunk short address: %v", err)
	}

	// GetChunks: one reply per address, in any order.
	var want [][]byte
	var req chunkpb.GetChunksRequest
	req.Db = "db"
	for i, d := range append(present, nil) {
		a := absent
		if i < len(present) {
			a = addr.Of(d)
		}
		req.Addresses = append(req.Addresses, a[:])
		want = append(want, d)
	}
	stream, err := client.GetChunks(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	var replies []*chunkpb.ChunkReply
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, r)
	}
	if len(replies) != len(want) {
		t.Fatalf("GetChunks: %d replies for %d addresses", len(replies), len(want))
	}
	sort.Slice(replies, func(i, j int) bool { return replies[i].GetIndex() < replies[j].GetIndex() })
	for i, r := range replies {
		wantFound := i < len(present)
		if r.GetIndex() != uint32(i) || !bytes.Equal(r.GetAddress(), req.Addresses[i]) || r.GetFound() != wantFound ||
			!bytes.Equal(r.GetContents(), want[i]) || (wantFound && api.TierFromProto(r.GetTier()) != api.TierDisk) {
			t.Fatalf("GetChunks reply %d: index %d found %v tier %v, %d bytes", i, r.GetIndex(), r.GetFound(), r.GetTier(), len(r.GetContents()))
		}
	}

	// HasChunks.
	has, err := client.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: "db", Addresses: req.Addresses})
	if err != nil {
		t.Fatal(err)
	}
	if p := has.GetPresent(); len(p) != 4 || !p[0] || !p[1] || !p[2] || p[3] {
		t.Fatalf("HasChunks: %v", p)
	}
}
