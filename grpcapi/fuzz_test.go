package grpcapi

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The gRPC handlers under arbitrary requests, against a healthy store: no
// Internal, Unknown or DataLoss (nothing the client sends is the
// service's fault), and every chunk answered hashes to its address.

// fakeStream is a server stream that collects what the handler sends.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*chunkpb.ChunkReply
}

func (s *fakeStream) Context() context.Context             { return s.ctx }
func (s *fakeStream) Send(m *chunkpb.ChunkReply) error     { s.sent = append(s.sent, m); return nil }
func (s *fakeStream) SetHeader(metadata.MD) error          { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error         { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)               {}
func (s *fakeStream) SendMsg(m any) error                  { return nil }
func (s *fakeStream) RecvMsg(m any) error                  { return nil }
func (s *fakeStream) Method() string                       { return chunkpb.ChunkCache_GetChunks_FullMethodName }
func (s *fakeStream) SetSendCompress(string) error         { return nil }
func (s *fakeStream) SendCompress() string                 { return "" }
func (s *fakeStream) SupportedCompressors() []string       { return nil }
func (s *fakeStream) ClientSupportedCompressors() []string { return nil }

func FuzzGRPCAPI(f *testing.F) {
	a := addr.Of([]byte("seed"))
	f.Add("db1", a[:], uint8(1))
	f.Add("db1", a[:10], uint8(3))
	f.Add("../x", a[:], uint8(2))
	f.Add("", []byte{}, uint8(0))
	f.Add("nosuch", bytes.Repeat(a[:], 2), uint8(40))
	fx := newFixture(f, testdb.Options{Chunks: 20, Files: 2}, cache.Config{MemBytes: 1 << 20})
	g := &grpcService{c: fx.Cache, timeout: time.Minute}
	f.Fuzz(func(t *testing.T, db string, raw []byte, n uint8) {
		ctx := context.Background()
		// Up to n addresses cut from raw (and from the database, to mix
		// present ones in).
		var as [][]byte
		all := fx.DB.All()
		for i := 0; i < int(n); i++ {
			if i%3 == 0 {
				as = append(as, all[i%len(all)][:])
			} else if len(raw) > 0 {
				as = append(as, raw[:min(len(raw), 20+i%3-1)])
			}
		}
		ok := func(err error) {
			t.Helper()
			switch status.Code(err) {
			case codes.Internal, codes.Unknown, codes.DataLoss:
				t.Fatalf("db %q, %d addresses: %v", db, len(as), err)
			}
		}
		r, err := g.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: db, Address: raw})
		ok(err)
		if got := addr.Of(r.GetContents()); err == nil && r.Found && !bytes.Equal(got[:], raw) {
			t.Fatal("GetChunk: contents do not hash to the address")
		}
		_, err = g.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: db, Addresses: as})
		ok(err)
		st := &fakeStream{ctx: ctx}
		ok(g.GetChunks(&chunkpb.GetChunksRequest{Db: db, Addresses: as}, st))
		for _, m := range st.sent {
			if got := addr.Of(m.Contents); m.Found && !bytes.Equal(got[:], m.Address) {
				t.Fatal("GetChunks: contents do not hash to the address")
			}
		}
	})
}
