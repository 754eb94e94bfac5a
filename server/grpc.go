package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// MaxBatch is the most addresses one batch request may carry.
const MaxBatch = api.MaxBatch

// NewGRPC returns a gRPC server with the ChunkCache service, health
// checking and reflection registered; opts add to the server's options
// (TLS credentials, the interceptors of Auth). Every call is counted in
// the metrics by a stats handler, including calls refused before they
// reach a handler (a message over the size limit).
func NewGRPC(c *Cache, opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(api.MaxGRPCRequest),
		grpc.MaxSendMsgSize(api.MaxGRPCMessage),
		grpc.StatsHandler(&grpcStats{m: c.metrics}),
	}, opts...)
	s := grpc.NewServer(opts...)
	chunkpb.RegisterChunkCacheServer(s, &grpcService{c: c})
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(chunkpb.ChunkCache_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return s
}

type grpcService struct {
	chunkpb.UnimplementedChunkCacheServer
	c *Cache
}

func (g *grpcService) GetChunk(ctx context.Context, req *chunkpb.GetChunkRequest) (*chunkpb.GetChunkResponse, error) {
	a, err := addr.FromBytes(req.Address)
	if err != nil {
		return nil, toStatus(errorf(KindBadRequest, err, "bad address"))
	}
	r, err := g.c.GetChunk(ctx, req.Db, a)
	if err != nil {
		return nil, toStatus(err)
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
	timeout := g.c.cfg.ClientTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	err = g.c.GetChunks(stream.Context(), req.Db, addrs, func(i int, r Result) error {
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
		return toStatus(err)
	}
	timer.Reset(timeout)
	select {
	case err := <-sent:
		return toStatus(err)
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
		return nil, toStatus(err)
	}
	return &chunkpb.HasChunksResponse{Present: present}, nil
}

// GetRoot answers the database's current root (Cache.Root), as the HTTP
// API's GET /v1/dbs/{db}/root does.
func (g *grpcService) GetRoot(ctx context.Context, req *chunkpb.GetRootRequest) (*chunkpb.GetRootResponse, error) {
	info, err := g.c.Root(ctx, req.Db, req.Fresh)
	if err != nil {
		return nil, toStatus(err)
	}
	root, err := addr.Parse(info.Root)
	if err != nil {
		return nil, toStatus(fmt.Errorf("database %q: root: %w", req.Db, err))
	}
	return &chunkpb.GetRootResponse{Root: root[:], AgeMs: info.AgeMS, TtlMs: info.TTLMS, Stale: info.Stale}, nil
}

func batchAddrs(raw [][]byte) ([]addr.Addr, error) {
	if len(raw) > MaxBatch {
		return nil, toStatus(errorf(KindTooLarge, nil, "batch of %d addresses exceeds the limit of %d", len(raw), MaxBatch))
	}
	out := make([]addr.Addr, len(raw))
	for i, b := range raw {
		a, err := addr.FromBytes(b)
		if err != nil {
			return nil, toStatus(errorf(KindBadRequest, err, "address %d", i))
		}
		out[i] = a
	}
	return out, nil
}

// toStatus maps service errors to gRPC statuses, by the kinds table.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

// grpcStats counts every call by method and code, and its latency: the
// calls a handler never saw (refused for their size, say) included.
type grpcStats struct{ m *metrics }

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
	s.m.latency.WithLabelValues(name).Observe(end.EndTime.Sub(end.BeginTime).Seconds())
	s.m.requests.WithLabelValues(name, code.String()).Inc()
	if code == codes.ResourceExhausted {
		s.m.rejected.WithLabelValues(name, "too large").Inc()
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
	return "grpc_other" // reflection, unknown methods: a bounded label set

}
