package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

// Auth guards the HTTP and gRPC APIs with bearer tokens (see package
// auth): a request without a token, or with one the file does not hold,
// is refused as unauthenticated (HTTP 401, gRPC Unauthenticated); one whose
// token does not grant the database it names is refused as forbidden
// (403, PermissionDenied), with the same answer whether or not the
// database exists, so names cannot be probed. Health checks stay open;
// /metrics needs a token unless MetricsOpen.
//
// Which database a request reads is found by one small rule per route
// (httpAccess, grpcAccess below). An HTTP route without a rule cannot be
// registered (NewHandler panics), and a gRPC method without one is
// refused for everyone (TestAuthRulesCoverRoutes finds it): a new route is
// reachable once it has its entry.
type Auth struct {
	// Tokens are the tokens in force (reloadable).
	Tokens *auth.File
	// MetricsOpen serves /metrics without a token.
	MetricsOpen bool
	// Logger gets refusals at debug level and missing rules as errors.
	// The token itself is never logged.
	Logger *slog.Logger
}

// access is who may call one route.
type access struct {
	open    bool                                         // no token needed
	metrics bool                                         // a token, unless Auth.MetricsOpen
	db      func(pattern string, r *http.Request) string // the database read; nil: any known token
}

var (
	openAccess    = access{open: true}
	metricsAccess = access{metrics: true}
	anyToken      = access{}
	pathDB        = access{db: pathValue("db")}
)

// httpAccess has the rule of every HTTP route, by its ServeMux pattern.
var httpAccess = map[string]access{
	api.PatternChunk:        pathDB,
	api.PatternChunks:       pathDB,
	api.PatternDB:           pathDB,
	api.PatternRoot:         pathDB,
	api.PatternOpenSet:      pathDB,
	api.PatternVersionImage: pathDB,
	api.PatternImages:       pathDB,
	api.PatternImage:        pathDB,
	api.PatternImageFill:    pathDB,
	// The list shows only the databases the token grants (view.go).
	api.PatternDBs:       anyToken,
	api.PatternCache:     anyToken,
	api.PatternDropCache: pathDB,
	"GET /metrics":       metricsAccess,
	"GET /healthz":       openAccess,
	"GET /readyz":        openAccess,
	// The Dolt remote's downloads: Dolt sends no token with them. With
	// tokens on, the remote signs the URLs it hands to callers whose token
	// grants the database, and refuses unsigned ones (doltremote.Config.SignKey).
	api.PatternDoltFiles: openAccess,
}

// ruledMux is a ServeMux that refuses, when a route is registered, a
// route without its entry in httpAccess: a new route cannot be served
// before it says who may call it.
type ruledMux struct{ *http.ServeMux }

func mustHaveRule(pattern string) {
	if _, ok := httpAccess[pattern]; !ok {
		panic("server: HTTP route " + pattern + " has no access rule (add it to httpAccess in auth.go)")
	}
}

func (m ruledMux) Handle(pattern string, h http.Handler) {
	mustHaveRule(pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m ruledMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	mustHaveRule(pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

// need is what a gRPC call must show.
type need int

const (
	needNothing need = iota // open: health checks
	needToken               // any known token
	needDB                  // a token that grants the database named
)

// grpcAccess has the rule of every gRPC method, by its full name: the
// function returns what the call needs and, for needDB, the database its
// request message reads.
var grpcAccess = map[string]func(msg any) (db string, n need){
	chunkpb.ChunkCache_GetChunk_FullMethodName:                             msgDB,
	chunkpb.ChunkCache_GetChunks_FullMethodName:                            msgDB,
	chunkpb.ChunkCache_HasChunks_FullMethodName:                            msgDB,
	chunkpb.ChunkCache_GetRoot_FullMethodName:                              msgDB,
	healthpb.Health_Check_FullMethodName:                                   openMethod,
	healthpb.Health_Watch_FullMethodName:                                   openMethod,
	healthpb.Health_List_FullMethodName:                                    openMethod,
	reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName:      tokenMethod,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: tokenMethod,
	// The Dolt remote names a repository, not a database: a known token
	// here, and the remote checks its grant against the database the
	// repository resolves to (GrantFrom).
	remotesapi.ChunkStoreService_GetRepoMetadata_FullMethodName:         tokenMethod,
	remotesapi.ChunkStoreService_HasChunks_FullMethodName:               tokenMethod,
	remotesapi.ChunkStoreService_GetDownloadLocations_FullMethodName:    tokenMethod,
	remotesapi.ChunkStoreService_StreamDownloadLocations_FullMethodName: tokenMethod,
	remotesapi.ChunkStoreService_StreamChunkLocations_FullMethodName:    tokenMethod,
	remotesapi.ChunkStoreService_GetUploadLocations_FullMethodName:      tokenMethod,
	remotesapi.ChunkStoreService_Rebase_FullMethodName:                  tokenMethod,
	remotesapi.ChunkStoreService_Root_FullMethodName:                    tokenMethod,
	remotesapi.ChunkStoreService_Commit_FullMethodName:                  tokenMethod,
	remotesapi.ChunkStoreService_ListTableFiles_FullMethodName:          tokenMethod,
	remotesapi.ChunkStoreService_RefreshTableFileUrl_FullMethodName:     tokenMethod,
	remotesapi.ChunkStoreService_AddTableFiles_FullMethodName:           tokenMethod,
}

// msgDB reads the database of a request message with a Db field. A
// message without one (none yet) names the database "", which only a
// token for every database ("*") is granted.
func msgDB(msg any) (string, need) {
	if m, ok := msg.(interface{ GetDb() string }); ok {
		return m.GetDb(), needDB
	}
	return "", needDB
}

func openMethod(any) (string, need)  { return "", needNothing }
func tokenMethod(any) (string, need) { return "", needToken }

// pathValue returns a rule reading the wildcard {name} of the route's
// pattern from the request's path (the auth layer runs before the mux
// has set r.PathValue).
func pathValue(name string) func(pattern string, r *http.Request) string {
	return func(pattern string, r *http.Request) string {
		if _, p, ok := strings.Cut(pattern, " "); ok {
			pattern = p
		}
		want := strings.Split(pattern, "/")
		got := strings.Split(r.URL.EscapedPath(), "/")
		for i, seg := range want {
			if seg == "{"+name+"}" && i < len(got) {
				v, err := url.PathUnescape(got[i])
				if err != nil {
					return got[i]
				}
				return v
			}
		}
		return ""
	}
}

// Router is an http.Handler that can name the route a request would take,
// as *http.ServeMux does with its Handler method.
type Router interface {
	http.Handler
	Handler(r *http.Request) (h http.Handler, pattern string)
}

// grantKey is the context key of a request's *auth.Grant.
type grantKey struct{}

// GrantFrom returns the grant of the request's token, or false when the
// service runs without tokens.
func GrantFrom(ctx context.Context) (*auth.Grant, bool) {
	g, ok := ctx.Value(grantKey{}).(*auth.Grant)
	return g, ok
}

// Refusals, the same whatever was asked for.
const (
	msgUnauthenticated = "missing or unknown bearer token (send Authorization: Bearer TOKEN)"
	msgForbidden       = "the token does not grant this database"
)

// check decides one request: the grant, or a gRPC-style code and message.
func (a *Auth) check(token string, db string, needDB, open bool) (*auth.Grant, codes.Code) {
	if open {
		return nil, codes.OK
	}
	g, ok := a.Tokens.Lookup(token)
	if !ok {
		return nil, codes.Unauthenticated
	}
	if needDB && !g.Allows(db) {
		return nil, codes.PermissionDenied
	}
	return g, codes.OK
}

// bearerToken returns the token of an Authorization header: "Bearer
// TOKEN", or "Basic" credentials whose password is the token (how a Dolt
// client sends DOLT_REMOTE_PASSWORD with --user; the user name is ignored).
func bearerToken(h string) string {
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	if len(h) > 6 && strings.EqualFold(h[:6], "basic ") {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[6:])); err == nil {
			if _, pass, ok := strings.Cut(string(b), ":"); ok {
				return pass
			}
		}
	}
	return ""
}

// HTTP wraps next: every request that takes a route is checked against
// that route's rule first. Requests that take no route (404, 405) read
// nothing and go through.
func (a *Auth) HTTP(next Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := next.Handler(r)
		if pattern == "" {
			next.ServeHTTP(w, r)
			return
		}
		rule, ok := httpAccess[pattern]
		if !ok {
			a.Logger.Error("route has no access rule: refused", "route", pattern)
			api.WriteError(w, http.StatusForbidden, "route "+pattern+" has no access rule")
			return
		}
		open := rule.open || (rule.metrics && a.MetricsOpen)
		db := ""
		if rule.db != nil {
			db = rule.db(pattern, r)
		}
		g, code := a.check(bearerToken(r.Header.Get("Authorization")), db, rule.db != nil, open)
		switch code {
		case codes.Unauthenticated:
			a.Logger.Debug("refused: no known token", "route", pattern, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="chunkd"`)
			api.WriteError(w, http.StatusUnauthorized, msgUnauthenticated)
			return
		case codes.PermissionDenied:
			a.Logger.Debug("refused: database not granted", "route", pattern, "db", db, "remote", r.RemoteAddr)
			api.WriteError(w, http.StatusForbidden, msgForbidden)
			return
		}
		if g != nil {
			r = r.WithContext(context.WithValue(r.Context(), grantKey{}, g))
		}
		next.ServeHTTP(w, r)
	})
}

// GRPCOptions returns the interceptors that check every call.
func (a *Auth) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

func (a *Auth) grpcCheck(ctx context.Context, method string, msg any) (context.Context, error) {
	rule, ok := grpcAccess[method]
	if !ok {
		a.Logger.Error("gRPC method has no access rule: refused", "method", method)
		return ctx, status.Error(codes.PermissionDenied, "method "+method+" has no access rule")
	}
	db, n := rule(msg)
	token := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			token = bearerToken(v[0])
		}
	}
	g, code := a.check(token, db, n == needDB, n == needNothing)
	switch code {
	case codes.Unauthenticated:
		a.Logger.Debug("refused: no known token", "method", method)
		return ctx, status.Error(code, msgUnauthenticated)
	case codes.PermissionDenied:
		a.Logger.Debug("refused: database not granted", "method", method, "db", db)
		return ctx, status.Error(code, msgForbidden)
	}
	if g != nil {
		ctx = context.WithValue(ctx, grantKey{}, g)
	}
	return ctx, nil
}

func (a *Auth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.grpcCheck(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// stream checks a streaming call on its first request message, which
// names the database: the handler's first RecvMsg fails if refused.
func (a *Auth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &checkedStream{ServerStream: ss, a: a, method: info.FullMethod, ctx: ss.Context()})
}

type checkedStream struct {
	grpc.ServerStream
	a       *Auth
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
		ctx, err := s.a.grpcCheck(s.ServerStream.Context(), s.method, m)
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
		ctx, err := s.a.grpcCheck(s.ServerStream.Context(), s.method, nil)
		if err != nil {
			return err
		}
		s.ctx, s.checked = ctx, true
	}
	return s.ServerStream.SendMsg(m)
}

// TLSFiles are the PEM files of a service's TLS.
type TLSFiles struct {
	Cert, Key string // the service's certificate (chain) and key
	ClientCA  string // if set, clients must present a certificate it signed
}

// Config returns the TLS configuration of the files, and a function that
// reads the certificate and key again (for SIGHUP, when they are renewed):
// handshakes after it use the new pair; a pair that does not load is an
// error and leaves the old one in use. The client CA is read once.
func (f TLSFiles) Config() (*tls.Config, func() error, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, errors.New("TLS needs both a certificate and a key")
	}
	var cur atomic.Pointer[tls.Certificate]
	reload := func() error {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("TLS certificate: %w", err)
		}
		cur.Store(&cert)
		return nil
	}
	if err := reload(); err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cur.Load(), nil },
	}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("TLS client CA %s holds no PEM certificate", f.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, reload, nil
}
