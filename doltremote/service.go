package doltremote

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/grpcapi"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/manifest"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PathPrefix is where Routes serve table-file downloads.
const PathPrefix = "/dolt/v1/"

// MaxRequest is the largest request the service must accept: a HasChunks
// of the 16,384 addresses Dolt sends at once (each 20 bytes and its
// framing), and room for the rest. Pass ServerOptions to a gRPC server it
// shares.
const MaxRequest = 16384*(addr.Size+3) + 64<<10

// ServerOptions returns the options a gRPC server needs to carry the
// service: a receive limit of MaxRequest (or the chunk API's, if larger).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(max(MaxRequest, api.MaxGRPCRequest))}
}

// Config configures a Service.
type Config struct {
	Cache *cache.Cache
	// HTTPAddr is the host:port of the HTTP listener serving Handler,
	// which download URLs name. An unspecified host (0.0.0.0, ::, empty)
	// is replaced by the host the client dialed for gRPC.
	HTTPAddr string
	// HTTPS makes the URLs https: the listener serves TLS.
	HTTPS bool
	// SignKey, if set, signs the download URLs (HMAC-SHA256, valid for
	// twice URLTTL), and Handler refuses any other: Dolt sends no token
	// with its downloads, so with tokens on, a signed URL is how a caller
	// whose token grants the database passes the grant on. Set it whenever
	// the service checks tokens.
	SignKey []byte
	// FileBase, if set, returns the base URL (scheme://host:port) of the
	// HTTP listener that serves table file key best: in a cluster, its
	// owner's (package cluster), so a clone reads each file from the node
	// that keeps it; "" names this service's own. The nodes must share
	// SignKey.
	FileBase func(key string) string
	// URLTTL is how long a client may use a download URL before it asks
	// for a new one with RefreshTableFileUrl (default 1 hour). The URLs do
	// not expire; this bounds how long a client keeps a stale one.
	URLTTL time.Duration
	// ResolveTTL is how long a database found missing is remembered
	// (default 5 s): resolving ORG/REPO to REPO costs a store read for the
	// missing ORG/REPO manifest.
	ResolveTTL time.Duration
	Logger     *slog.Logger
	Registry   prometheus.Registerer // default: a new registry
}

// Service is the Dolt remote: the gRPC ChunkStoreService (Register) and
// the table-file downloads (Handler).
type Service struct {
	remotesapi.UnimplementedChunkStoreServiceServer
	cfg     Config
	c       *cache.Cache
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	missing map[string]time.Time // databases found missing, and when
}

// New returns the Dolt remote over cfg.Cache.
func New(cfg Config) (*Service, error) {
	if cfg.Cache == nil {
		return nil, errors.New("doltremote: no cache")
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("doltremote: HTTP address %q: %w", cfg.HTTPAddr, err)
	}
	if cfg.URLTTL == 0 {
		cfg.URLTTL = time.Hour
	}
	if cfg.ResolveTTL == 0 {
		cfg.ResolveTTL = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	return &Service{
		cfg: cfg, c: cfg.Cache, log: cfg.Logger,
		metrics: newMetrics(cfg.Registry),
		missing: map[string]time.Time{},
	}, nil
}

// GRPC is the ChunkStoreService, for a server made with ServerOptions.
// Its calls name a repository, not a database: any known token may call
// them, and the service checks the token's grant against the database the
// repository resolves to (auth.FromContext).
func (s *Service) GRPC() grpcapi.Service {
	return grpcapi.Service{Desc: &remotesapi.ChunkStoreService_ServiceDesc, Impl: s, Need: auth.AnyToken}
}

// Routes are the table-file downloads, on the HTTP listener at
// Config.HTTPAddr. Dolt sends no token with them: they are open, and
// with tokens on, the remote signs the URLs it hands to callers whose
// token grants the database and refuses unsigned ones (Config.SignKey).
func (s *Service) Routes() []httpapi.Route {
	return []httpapi.Route{{Pattern: api.PatternDoltFiles, Handler: http.HandlerFunc(s.download), Need: auth.Open}}
}

// repoRequest is what every request names its repository with.
type repoRequest interface {
	GetRepoId() *remotesapi.RepoId
	GetRepoPath() string
}

// repoPath returns the repository path a request names.
func repoPath(req repoRequest) (string, error) {
	p := strings.Trim(req.GetRepoPath(), "/")
	if p == "" {
		if id := req.GetRepoId(); id != nil && id.Org != "" && id.RepoName != "" {
			p = id.Org + "/" + id.RepoName
		}
	}
	if p == "" {
		return "", status.Error(codes.InvalidArgument, "no repository: the request has neither repo_path nor repo_id")
	}
	return p, nil
}

// resolve returns the database a request's repository names: the database
// at its path, or, if there is none and the path has several segments, the
// one named by its last segment. With tokens, only databases the caller's
// token grants are candidates, and a path naming none of them is refused
// whether or not they exist.
func (s *Service) resolve(ctx context.Context, req repoRequest) (string, error) {
	p, err := repoPath(req)
	if err != nil {
		return "", err
	}
	candidates := []string{p}
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		candidates = append(candidates, p[i+1:])
	}
	if g, ok := auth.FromContext(ctx); ok {
		candidates = slices.DeleteFunc(candidates, func(db string) bool { return !g.Allows(db) })
		if len(candidates) == 0 {
			return "", status.Errorf(codes.PermissionDenied, "the token does not grant repository %q", p)
		}
	}
	for _, db := range candidates {
		ok, err := s.exists(ctx, db)
		if err != nil {
			return "", err
		}
		if ok {
			return db, nil
		}
	}
	return "", status.Errorf(codes.NotFound, "no Dolt repository %q: the store has no database %s", p, strings.Join(quoteAll(candidates), " or "))
}

// exists reports whether database db is in the store. A missing one is
// remembered for ResolveTTL.
func (s *Service) exists(ctx context.Context, db string) (bool, error) {
	s.mu.Lock()
	at, missing := s.missing[db]
	s.mu.Unlock()
	if missing && time.Since(at) < s.cfg.ResolveTTL {
		return false, nil
	}
	_, err := s.c.Snapshot(ctx, db)
	switch {
	case err == nil:
		return true, nil
	case !isNotFound(err):
		return false, toStatus(err)
	}
	s.mu.Lock()
	if len(s.missing) > maxMissing { // names are the clients' to choose
		clear(s.missing)
	}
	s.missing[db] = time.Now()
	s.mu.Unlock()
	return false, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// maxMissing bounds the missing databases remembered.
const maxMissing = 10000

// snapshot resolves a request's repository and returns its database,
// refusing one Dolt could not read.
func (s *Service) snapshot(ctx context.Context, req repoRequest) (cache.Snapshot, error) {
	db, err := s.resolve(ctx, req)
	if err != nil {
		return cache.Snapshot{}, err
	}
	snap, err := s.c.Snapshot(ctx, db)
	if err != nil {
		return cache.Snapshot{}, toStatus(err)
	}
	switch {
	case snap.Format != "" && snap.Format != manifest.FormatDolt:
		return cache.Snapshot{}, status.Errorf(codes.FailedPrecondition, "database %q is not a Dolt database: its storage format is %q, not %q", db, snap.Format, manifest.FormatDolt)
	case snap.Journal:
		return cache.Snapshot{}, status.Errorf(codes.FailedPrecondition, "database %q is a local Dolt database with a chunk journal, which chunkd does not serve; push it to a remote in the store (dolt push to a file:// or S3 remote) and serve that", db)
	case snap.Unopened > 0:
		return cache.Snapshot{}, status.Errorf(codes.Unavailable, "database %q: %d of its table files cannot be read now, so a clone would be incomplete", db, snap.Unopened)
	}
	return snap, nil
}

// fileURL returns the download URL of file f of database db, for a client
// whose gRPC call came with ctx.
func (s *Service) fileURL(ctx context.Context, db string, f cache.FileInfo) string {
	host, port, _ := net.SplitHostPort(s.cfg.HTTPAddr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if a := md.Get(":authority"); len(a) > 0 {
				if h, _, err := net.SplitHostPort(a[0]); err == nil {
					host = h
				} else {
					host = a[0]
				}
			}
		}
	}
	name := f.Name
	if f.Archive {
		name += manifest.ArchiveSuffix
	}
	scheme := "http://"
	if s.cfg.HTTPS {
		scheme = "https://"
	}
	path := PathPrefix + db + "/" + name
	sig := s.signature(path, time.Now().Add(2*s.cfg.URLTTL))
	if s.cfg.FileBase != nil {
		if base := s.cfg.FileBase(db + "/" + name); base != "" {
			return base + path + sig
		}
	}
	return scheme + net.JoinHostPort(host, port) + path + sig
}

func (s *Service) refreshAfter() *timestamppb.Timestamp {
	return timestamppb.New(time.Now().Add(s.cfg.URLTTL))
}

// signature returns the query that signs a download path until expires,
// or "" when URLs are not signed.
func (s *Service) signature(path string, expires time.Time) string {
	if s.cfg.SignKey == nil {
		return ""
	}
	exp := strconv.FormatInt(expires.Unix(), 10)
	return "?expires=" + exp + "&sig=" + base64.RawURLEncoding.EncodeToString(s.mac(path, exp))
}

func (s *Service) mac(path, expires string) []byte {
	m := hmac.New(sha256.New, s.cfg.SignKey)
	m.Write([]byte(path + "\n" + expires))
	return m.Sum(nil)
}

// checkSignature checks a download request's signature, if URLs are
// signed.
func (s *Service) checkSignature(r *http.Request) error {
	if s.cfg.SignKey == nil {
		return nil
	}
	q := r.URL.Query()
	exp, sig := q.Get("expires"), q.Get("sig")
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if exp == "" || err != nil || !hmac.Equal(got, s.mac(r.URL.Path, exp)) {
		return errors.New("the download URL is not one this service signed: ask the Dolt remote for the table file's URL")
	}
	if t, err := strconv.ParseInt(exp, 10, 64); err != nil || time.Now().Unix() > t {
		return errors.New("the download URL has expired: ask for a new one (RefreshTableFileUrl)")
	}
	return nil
}

// isNotFound reports whether a cache error says the database is unknown.
func isNotFound(err error) bool {
	var e *cache.Error
	return errors.As(err, &e) && e.Kind == cache.KindUnknownDB
}

// toStatus maps a cache error to a gRPC status.
func toStatus(err error) error { return grpcapi.Status(err) }

// httpStatus returns the HTTP status of a cache error.
func httpStatus(err error) int { return httpapi.Status(err) }
