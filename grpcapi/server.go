// Package grpcapi serves the cache service over gRPC: the cache's own
// service (ChunkCache), the services features plug in (Service: the Dolt
// remote's), health checking and reflection, on one grpc.Server. Every
// service carries its own access rule (an auth.Need), checked by the
// guard's interceptors, so this package names no method of any feature
// and the guard none at all.
package grpcapi

import (
	"context"
	"strings"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/reqmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Service is one gRPC service to serve.
type Service struct {
	Desc *grpc.ServiceDesc
	Impl any
	// Need is who may call its methods; auth.DBToken reads the database
	// from the request message's Db (GetDb). A service without one (the
	// zero Need) is refused at New.
	Need auth.Need
}

// Config configures a server.
type Config struct {
	// Guard checks tokens; nil serves every call to everyone.
	Guard *auth.Guard
	// Registry gets the request metrics (every call, by method and code,
	// including calls refused before a handler saw them).
	Registry prometheus.Registerer
	// Options add to the server's options (TLS credentials, a larger
	// message limit for a feature's service).
	Options []grpc.ServerOption
}

// New returns a gRPC server with services registered, and health checking
// (open to all) and reflection (any token) besides. It panics if a service
// has no access rule.
func New(cfg Config, services ...Service) *grpc.Server {
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	rules := map[string]auth.Need{
		healthpb.Health_ServiceDesc.ServiceName:    auth.Open,
		"grpc.reflection.v1.ServerReflection":      auth.AnyToken,
		"grpc.reflection.v1alpha.ServerReflection": auth.AnyToken,
	}
	for _, s := range services {
		if !s.Need.Valid() {
			panic("grpcapi: service " + s.Desc.ServiceName + " has no access rule (Service.Need)")
		}
		rules[s.Desc.ServiceName] = s.Need
	}
	g := &guard{g: cfg.Guard, rules: rules}
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(api.MaxGRPCRequest),
		grpc.MaxSendMsgSize(api.MaxGRPCMessage),
		grpc.StatsHandler(&grpcStats{req: reqmetrics.On(cfg.Registry)}),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}, cfg.Options...)
	srv := grpc.NewServer(opts...)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, s := range services {
		srv.RegisterService(s.Desc, s.Impl)
		h.SetServingStatus(s.Desc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(srv, h)
	reflection.Register(srv)
	return srv
}

// kindCodes is the gRPC code of each kind of the cache's errors.
var kindCodes = map[cache.Kind]codes.Code{
	cache.KindInternal:         codes.Internal,
	cache.KindBadRequest:       codes.InvalidArgument,
	cache.KindTooLarge:         codes.ResourceExhausted,
	cache.KindUnknownDB:        codes.NotFound,
	cache.KindUnknownChunk:     codes.Internal, // never "absent"
	cache.KindCorrupt:          codes.DataLoss,
	cache.KindStoreUnreachable: codes.Unavailable,
	cache.KindStoreDenied:      codes.Unavailable,
	cache.KindShuttingDown:     codes.Unavailable,
	cache.KindCanceled:         codes.Canceled,
	cache.KindUnknownImage:     codes.NotFound,
	cache.KindNotServed:        codes.Unimplemented,
	cache.KindUnknownFile:      codes.NotFound,
	cache.KindNoSuchVersion:    codes.NotFound,
	cache.KindVersionCollected: codes.FailedPrecondition,
}

// Code returns the gRPC code of err, by its kind.
func Code(err error) codes.Code {
	if c, ok := kindCodes[cache.KindOf(err)]; ok {
		return c
	}
	return codes.Internal
}

// Status returns err as a gRPC status error, by its kind (an error that
// is a status already is returned as it is).
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(Code(err), err.Error())
}

// guard checks every call against its service's rule.
type guard struct {
	g     *auth.Guard
	rules map[string]auth.Need // by service name
}

// check decides a call of method (its full name) with request message
// msg (nil for a stream that sends first), returning the context that
// carries the token's grant.
func (g *guard) check(ctx context.Context, method string, msg any) (context.Context, error) {
	if g.g == nil {
		return ctx, nil
	}
	service := strings.TrimPrefix(method, "/")
	if i := strings.LastIndexByte(service, '/'); i >= 0 {
		service = service[:i]
	}
	n := g.rules[service] // the zero Need for a service of no rule: refused
	db := ""
	if m, ok := msg.(interface{ GetDb() string }); ok {
		db = m.GetDb()
	}
	token := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			token = auth.BearerToken(v[0])
		}
	}
	from := ""
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	gr, err := g.g.Check(n, token, db, method, from)
	switch err {
	case nil:
		return auth.NewContext(ctx, gr), nil
	case auth.ErrUnauthenticated:
		return ctx, status.Error(codes.Unauthenticated, err.Error())
	default:
		return ctx, status.Error(codes.PermissionDenied, err.Error())
	}
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := g.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// stream checks a streaming call on its first request message, which
// names the database: the handler's first RecvMsg fails if refused.
func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &checkedStream{ServerStream: ss, g: g, method: info.FullMethod, ctx: ss.Context()})
}

type checkedStream struct {
	grpc.ServerStream
	g       *guard
	method  string
	ctx     context.Context
	checked bool
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		ctx, err := s.g.check(s.ServerStream.Context(), s.method, m)
		if err != nil {
			return err
		}
		s.ctx, s.checked = ctx, true
	}
	return nil
}

func (s *checkedStream) SendMsg(m any) error {
	if !s.checked {
		// A stream that sends before it has read a request (a server
		// push, health Watch) is checked with no message.
		ctx, err := s.g.check(s.ServerStream.Context(), s.method, nil)
		if err != nil {
			return err
		}
		s.ctx, s.checked = ctx, true
	}
	return s.ServerStream.SendMsg(m)
}
