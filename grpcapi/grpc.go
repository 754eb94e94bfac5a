package grpcapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/reqmetrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// ChunkCache is the cache's own gRPC service (chunkd.v1.ChunkCache), its
// calls each reading the database their message names. timeout is the
// longest a streamed answer waits for the client to take each part.
func ChunkCache(c *cache.Cache, timeout time.Duration) Service {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return Service{Desc: &chunkpb.ChunkCache_ServiceDesc, Impl: &grpcService{c: c, timeout: timeout}, Need: auth.DBToken}
}

type grpcService struct {
	chunkpb.UnimplementedChunkCacheServer
	c       *cache.Cache
	timeout time.Duration
}

func (g *grpcService) GetChunk(ctx context.Context, req *chunkpb.GetChunkRequest) (*chunkpb.GetChunkResponse, error) {
	a, err := addr.FromBytes(req.Address)
	if err != nil {
		return nil, Status(cache.Errorf(cache.KindBadRequest, err, "bad address"))
	}
	r, err := g.c.GetChunk(ctx, req.Db, a)
	if err != nil {
		return nil, Status(err)
	}
	return &chunkpb.GetChunkResponse{Found: r.Found, Contents: r.Data, Tier: chunkpb.Tier(r.Tier)}, nil
}

// GetChunks streams the answers. The client has ClientTimeout to take
// each one: sends happen on a goroutine of their own, so a client that
// stops reading is cut off (the handler returns, which ends the stream
// and unblocks the send) rather than holding the call forever.
func (g *grpcService) GetChunks(req *chunkpb.GetChunksRequest, stream grpc.ServerStreamingServer[chunkpb.ChunkReply]) error {
	addrs, err := batchAddrs(req.Addresses)
	if err != nil {
		return err
	}
	out := make(chan *chunkpb.ChunkReply)
	sent := make(chan error, 1)
	go func() {
		for m := range out {
			if err := stream.Send(m); err != nil {
				sent <- err
				for range out { // drain: the handler is returning
				}
				return
			}
		}
		sent <- nil
	}()
	timeout := g.timeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	err = g.c.GetChunks(stream.Context(), req.Db, addrs, func(i int, r cache.Result) error {
		timer.Reset(timeout)
		select {
		case out <- &chunkpb.ChunkReply{Index: uint32(i), Address: req.Addresses[i], Found: r.Found, Contents: r.Data, Tier: chunkpb.Tier(r.Tier)}:
			return nil
		case err := <-sent:
			sent <- err
			return err
		case <-timer.C:
			return status.Errorf(codes.DeadlineExceeded, "the client took no answer for %v", timeout)
		}
	}, nil)
	close(out)
	if err != nil {
		return Status(err)
	}
	timer.Reset(timeout)
	select {
	case err := <-sent:
		return Status(err)
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the client took no answer for %v", timeout)
	}
}

func (g *grpcService) HasChunks(ctx context.Context, req *chunkpb.HasChunksRequest) (*chunkpb.HasChunksResponse, error) {
	addrs, err := batchAddrs(req.Addresses)
	if err != nil {
		return nil, err
	}
	present, err := g.c.HasChunks(ctx, req.Db, addrs)
	if err != nil {
		return nil, Status(err)
	}
	return &chunkpb.HasChunksResponse{Present: present}, nil
}

// GetRoot answers the database's current root (Cache.Root), as the HTTP
// API's GET /v1/dbs/{db}/root does.
func (g *grpcService) GetRoot(ctx context.Context, req *chunkpb.GetRootRequest) (*chunkpb.GetRootResponse, error) {
	info, err := g.c.Root(ctx, req.Db, req.Fresh)
	if err != nil {
		return nil, Status(err)
	}
	root, err := addr.Parse(info.Root)
	if err != nil {
		return nil, Status(fmt.Errorf("database %q: root: %w", req.Db, err))
	}
	return &chunkpb.GetRootResponse{Root: root[:], AgeMs: info.AgeMS, TtlMs: info.TTLMS, Stale: info.Stale}, nil
}

func batchAddrs(raw [][]byte) ([]addr.Addr, error) {
	if len(raw) > api.MaxBatch {
		return nil, Status(cache.Errorf(cache.KindTooLarge, nil, "batch of %d addresses exceeds the limit of %d", len(raw), api.MaxBatch))
	}
	out := make([]addr.Addr, len(raw))
	for i, b := range raw {
		a, err := addr.FromBytes(b)
		if err != nil {
			return nil, Status(cache.Errorf(cache.KindBadRequest, err, "address %d", i))
		}
		out[i] = a
	}
	return out, nil
}

// grpcStats counts every call by method and code, and its latency: the
// calls a handler never saw (refused for their size, say) included.
type grpcStats struct{ req *reqmetrics.Requests }

type rpcNameKey struct{}

func (s *grpcStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcNameKey{}, info.FullMethodName)
}

func (s *grpcStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	end, ok := st.(*stats.End)
	if !ok {
		return
	}
	method, _ := ctx.Value(rpcNameKey{}).(string)
	name := grpcMetricName(method)
	code := status.Code(end.Error)
	s.req.Latency.WithLabelValues(name).Observe(end.EndTime.Sub(end.BeginTime).Seconds())
	s.req.Count.WithLabelValues(name, code.String()).Inc()
	if code == codes.ResourceExhausted {
		s.req.Rejected.WithLabelValues(name, "too large").Inc()
	}
}

func (s *grpcStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (s *grpcStats) HandleConn(context.Context, stats.ConnStats)                       {}

// grpcMetricName turns "/chunkd.v1.ChunkCache/GetChunk" into the API label
// the HTTP side's names match: "grpc_get_chunk".
func grpcMetricName(method string) string {
	switch method {
	case chunkpb.ChunkCache_GetChunk_FullMethodName:
		return "grpc_get_chunk"
	case chunkpb.ChunkCache_GetChunks_FullMethodName:
		return "grpc_get_chunks"
	case chunkpb.ChunkCache_HasChunks_FullMethodName:
		return "grpc_has_chunks"
	}
	if strings.HasPrefix(method, "/grpc.health.") {
		return "grpc_health"
	}
	return "grpc_other" // reflection, the features' methods, unknown methods: a bounded label set
}
