package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// MaxBatch is the most addresses one batch request may carry.
const MaxBatch = api.MaxBatch

// NewGRPC returns a gRPC server with the ChunkCache service, health
// checking and reflection registered; opts add to the server's options
// (TLS credentials, the interceptors of Auth).
func NewGRPC(c *Cache, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(api.MaxGRPCRequest), grpc.MaxSendMsgSize(api.MaxGRPCMessage)}, opts...)...)
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

func (g *grpcService) observe(name string, start time.Time, err error) {
	g.c.metrics.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	g.c.metrics.requests.WithLabelValues(name, grpcCode(err).String()).Inc()
}

func (g *grpcService) GetChunk(ctx context.Context, req *chunkpb.GetChunkRequest) (resp *chunkpb.GetChunkResponse, err error) {
	defer func(start time.Time) { g.observe("grpc_get_chunk", start, err) }(time.Now())
	a, err := addr.FromBytes(req.Address)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "bad address: %v", err)
	}
	r, err := g.c.GetChunk(ctx, req.Db, a)
	if err != nil {
		return nil, toStatus(err)
	}
	return &chunkpb.GetChunkResponse{Found: r.Found, Contents: r.Data, Tier: chunkpb.Tier(r.Tier)}, nil
}

func (g *grpcService) GetChunks(req *chunkpb.GetChunksRequest, stream grpc.ServerStreamingServer[chunkpb.ChunkReply]) (err error) {
	defer func(start time.Time) { g.observe("grpc_get_chunks", start, err) }(time.Now())
	addrs, err := batchAddrs(req.Addresses)
	if err != nil {
		return err
	}
	err = g.c.GetChunks(stream.Context(), req.Db, addrs, func(i int, r Result) error {
		return stream.Send(&chunkpb.ChunkReply{Index: uint32(i), Address: req.Addresses[i], Found: r.Found, Contents: r.Data, Tier: chunkpb.Tier(r.Tier)})
	}, nil)
	return toStatus(err)
}

func (g *grpcService) HasChunks(ctx context.Context, req *chunkpb.HasChunksRequest) (resp *chunkpb.HasChunksResponse, err error) {
	defer func(start time.Time) { g.observe("grpc_has_chunks", start, err) }(time.Now())
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

func batchAddrs(raw [][]byte) ([]addr.Addr, error) {
	if len(raw) > MaxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %d addresses exceeds the limit of %d", len(raw), MaxBatch)
	}
	out := make([]addr.Addr, len(raw))
	for i, b := range raw {
		a, err := addr.FromBytes(b)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "address %d: %v", i, err)
		}
		out[i] = a
	}
	return out, nil
}

// toStatus maps service errors to gRPC status codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	code := codes.Internal
	switch statusOf(err) {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	case http.StatusBadGateway:
		code = codes.PermissionDenied
	}
	return status.Error(code, err.Error())
}

func grpcCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return status.Code(toStatus(err))
}
