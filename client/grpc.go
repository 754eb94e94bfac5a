//go:build !chunkd_nogrpc

package client

// The gRPC transport (grpc:// and grpcs:// services), left out of a build
// with the chunkd_nogrpc tag: the SQLite extension, which reads services
// over HTTP and so loads without gRPC and protobuf (about 2 ms less CPU
// time a process on the machine of docs/benchmarks.md).

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// grpcService talks to the service's gRPC API.
type grpcService struct {
	target string
	db     string
	conn   *grpc.ClientConn
	cc     chunkpb.ChunkCacheClient
}

func newGRPCService(u *url.URL, db string, tlsCfg *tls.Config, token string) (*grpcService, error) {
	bo := grpcbackoff.DefaultConfig
	bo.MaxDelay = maxBackoff
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 2 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(api.MaxFrameLen + 1<<20)),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	target := u.Scheme + "://" + u.Host
	conn, err := grpc.NewClient("passthrough:///"+u.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: service %s: %w", target, err)
	}
	return &grpcService{target: target, db: db, conn: conn, cc: chunkpb.NewChunkCacheClient(conn)}, nil
}

func (g *grpcService) String() string { return g.target }

func (g *grpcService) inline() bool { return false }

func (g *grpcService) close() error { return g.conn.Close() }

func (g *grpcService) root(ctx context.Context, fresh bool) (addr.Addr, error) {
	resp, err := g.cc.GetRoot(ctx, &chunkpb.GetRootRequest{Db: g.db, Fresh: fresh})
	if status.Code(err) == codes.NotFound {
		return addr.Addr{}, fmt.Errorf("cache service %s: %w: %w", g.target, ErrNoDatabase, err)
	}
	if err != nil {
		return addr.Addr{}, g.grpcError(err)
	}
	root, err := addr.FromBytes(resp.Root)
	return checkRoot(g.target, g.db, root, err, fresh, resp.Stale)
}

// grpcError classifies a failed call: Unavailable is a connection
// failure, and so are Unauthenticated and PermissionDenied (a token the
// service refuses will not be accepted on the next read either).
func (g *grpcService) grpcError(err error) error {
	code := status.Code(err)
	refused := code == codes.Unauthenticated || code == codes.PermissionDenied
	return &serviceError{conn: refused || code == codes.Unavailable, refused: refused, err: fmt.Errorf("cache service %s: %w", g.target, err)}
}

func (g *grpcService) get(ctx context.Context, a addr.Addr) (reply, error) {
	resp, err := g.cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: g.db, Address: a[:]})
	if status.Code(err) == codes.NotFound { // no such database
		return reply{}, nil
	}
	if err != nil {
		return reply{}, g.grpcError(err)
	}
	if !resp.GetFound() {
		return reply{}, nil
	}
	return reply{data: resp.GetContents(), tier: api.TierFromProto(resp.GetTier()), found: true}, nil
}

func (g *grpcService) getMany(ctx context.Context, as []addr.Addr, fn func(j int, r reply)) error {
	raw := make([][]byte, len(as))
	for j := range as {
		raw[j] = as[j][:]
	}
	stream, err := g.cc.GetChunks(ctx, &chunkpb.GetChunksRequest{Db: g.db, Addresses: raw})
	if err != nil {
		return g.grpcError(err)
	}
	seen := make([]bool, len(as))
	got := 0
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if status.Code(err) == codes.NotFound && got == 0 { // no such database
			for j := range as {
				fn(j, reply{})
			}
			return nil
		}
		if err != nil {
			return g.grpcError(fmt.Errorf("batch cut short after %d of %d chunks: %w", got, len(as), err))
		}
		j := int(r.GetIndex())
		if j >= len(as) || seen[j] {
			return &serviceError{err: fmt.Errorf("cache service %s: batch of %d answered index %d twice or out of range", g.target, len(as), j)}
		}
		if echo := r.GetAddress(); len(echo) != 0 && !bytes.Equal(echo, as[j][:]) {
			return &serviceError{err: fmt.Errorf("cache service %s: reply for index %d echoes address %x, not %s", g.target, j, echo, as[j])}
		}
		seen[j] = true
		got++
		fn(j, reply{data: r.GetContents(), tier: api.TierFromProto(r.GetTier()), found: r.GetFound()})
	}
	if got < len(as) {
		return &serviceError{err: fmt.Errorf("cache service %s: batch ended after %d of %d chunks", g.target, got, len(as))}
	}
	return nil
}

// bearer is gRPC per-call credentials carrying the token. It does not
// require TLS: a token to a service on loopback is still a token.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
