package service_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testcerts"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/service"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// authFixture serves database db1 over HTTPS and gRPC with TLS, both
// guarded by tokens: "right" may read db1, "other" only db2.
type authFixture struct {
	t         *testing.T
	db        *testdb.DB
	certs     testcerts.Files
	tokenFile string
	guard     *auth.Guard
	reloadTLS func() error
	https     string // https://127.0.0.1:PORT
	grpcAddr  string
}

func newAuthFixture(t *testing.T, metricsOpen bool) *authFixture {
	t.Helper()
	st := testdb.NewStore(t)
	af := &authFixture{t: t, db: testdb.MustMake(t, st, "db1", testdb.Options{Chunks: 10, Files: 1}), certs: testcerts.Make(t)}
	af.tokenFile = filepath.Join(t.TempDir(), "tokens")
	af.writeTokens("right db1 sales-*\nother db2\n")
	tokens, err := auth.Load(af.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	af.guard = &auth.Guard{Tokens: tokens, MetricsOpen: metricsOpen, Logger: quiet}
	tlsCfg, reload, err := auth.TLSFiles{Cert: af.certs.ServerCert, Key: af.certs.ServerKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	af.reloadTLS = reload
	svc := start(t, service.Config{Cache: cache.Config{Store: st, CacheDir: t.TempDir()}, HTTP: "127.0.0.1:0", GRPC: "127.0.0.1:0",
		DoltRemote: true, TLS: tlsCfg, Guard: af.guard})
	af.https, af.grpcAddr = svc.URL(), svc.GRPCAddr
	return af
}

func (af *authFixture) writeTokens(text string) {
	if err := os.WriteFile(af.tokenFile, []byte(text), 0o600); err != nil {
		af.t.Fatal(err)
	}
}

// clientTLS trusts the test authority.
func (af *authFixture) clientTLS() *tls.Config {
	pem, err := os.ReadFile(af.certs.CA)
	if err != nil {
		af.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool}
}

func (af *authFixture) do(method, path, token string, body []byte) (int, []byte) {
	af.t.Helper()
	req, err := http.NewRequest(method, af.https+path, bytes.NewReader(body))
	if err != nil {
		af.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: af.clientTLS()}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		af.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

var tokenCases = []struct{ name, token string }{
	{"none", ""},
	{"wrong", "wr0ng"},
	{"other", "other"},
	{"right", "right"},
}

func TestAuthHTTP(t *testing.T) {
	af := newAuthFixture(t, false)
	a := af.db.Files[0].Addrs[0]
	batch := api.EncodeAddresses(af.db.Files[0].Addrs[:3])
	for _, ep := range []struct {
		method, path string
		body         []byte
		want         [4]int // none, wrong, other, right
	}{
		{"GET", api.ChunkPath("db1", a), nil, [4]int{401, 401, 403, 200}},
		{"POST", api.ChunksPath("db1"), batch, [4]int{401, 401, 403, 200}},
		{"GET", api.DBPath("db1"), nil, [4]int{401, 401, 403, 200}},
		{"GET", api.DBsPath, nil, [4]int{401, 401, 200, 200}},
		{"GET", api.CachePath, nil, [4]int{401, 401, 200, 200}},
		{"DELETE", api.DropCachePath("db1"), nil, [4]int{401, 401, 403, 200}},
		// The features' routes carry their own rules: SQLite's (db1 is no
		// SQLite database: a 400 once the token is let through), and the
		// Dolt remote's downloads, which Dolt sends no token with (the
		// remote refuses an unsigned URL itself).
		{"GET", api.OpenSetPath("db1", addr.Addr{}, false, true), nil, [4]int{401, 401, 403, 400}},
		{"GET", api.ImagePath("db1", "nosuch"), nil, [4]int{401, 401, 403, 404}},
		{"GET", api.QueryPath("db1") + "?sql=SELECT+1", nil, [4]int{401, 401, 403, 400}},
		{"POST", api.QueryPath("db1"), []byte(`{"sql":"SELECT 1"}`), [4]int{401, 401, 403, 400}},
		{"GET", api.VersionsPath("db1"), nil, [4]int{401, 401, 403, 400}},
		// The console's page holds no data: it reads through the API with
		// the visitor's token.
		{"GET", "/", nil, [4]int{200, 200, 200, 200}},
		{"GET", "/console/console.js", nil, [4]int{200, 200, 200, 200}},
		{"GET", "/dolt/v1/db1/" + strings.Repeat("0", 32), nil, [4]int{403, 403, 403, 403}},
		{"GET", "/metrics", nil, [4]int{401, 401, 200, 200}},
		{"GET", "/healthz", nil, [4]int{200, 200, 200, 200}},
		{"GET", "/readyz", nil, [4]int{200, 200, 200, 200}},
		// Paths that are no route read nothing: no token needed to learn so.
		{"GET", "/nosuch", nil, [4]int{404, 404, 404, 404}},
		{"DELETE", api.ChunkPath("db1", a), nil, [4]int{405, 405, 405, 405}},
	} {
		for i, tc := range tokenCases {
			code, body := af.do(ep.method, ep.path, tc.token, ep.body)
			if code != ep.want[i] {
				t.Errorf("%s %s, %s token: %d %s, want %d", ep.method, ep.path, tc.name, code, body, ep.want[i])
			}
			if code >= 400 && !bytes.HasPrefix(body, []byte(`{"error":`)) {
				t.Errorf("%s %s, %s token: body %q is not an api.Error", ep.method, ep.path, tc.name, body)
			}
		}
	}

	// A database outside the token's list gets the same answer whether it
	// exists or not; one inside it that does not exist is a plain 404.
	c1, b1 := af.do("GET", api.DBPath("db1"), "other", nil)
	c2, b2 := af.do("GET", api.DBPath("nosuch"), "other", nil)
	if c1 != 403 || c2 != 403 || !bytes.Equal(b1, b2) {
		t.Errorf("existing db: %d %s; missing db: %d %s; want the same 403", c1, b1, c2, b2)
	}
	if c, b := af.do("GET", api.DBPath("sales-nosuch"), "right", nil); c != 404 {
		t.Errorf("granted missing db: %d %s, want 404", c, b)
	}
	// A path-escaped name is matched unescaped.
	if c, _ := af.do("GET", "/v1/dbs/d%62%31", "right", nil); c != 200 {
		t.Errorf("escaped db1: %d, want 200", c)
	}

	// The file read again: the old token is refused, the new one accepted.
	af.writeTokens("fresh db1\n")
	if err := af.guard.Tokens.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, _ := af.do("GET", api.DBPath("db1"), "right", nil); c != 401 {
		t.Errorf("token removed by reload: %d, want 401", c)
	}
	if c, _ := af.do("GET", api.DBPath("db1"), "fresh", nil); c != 200 {
		t.Errorf("token added by reload: %d, want 200", c)
	}
}

func TestAuthMetricsOpen(t *testing.T) {
	af := newAuthFixture(t, true)
	if c, _ := af.do("GET", "/metrics", "", nil); c != 200 {
		t.Errorf("open metrics without a token: %d", c)
	}
	if c, _ := af.do("GET", api.DBPath("db1"), "", nil); c != 401 {
		t.Errorf("db info without a token: %d, want 401", c)
	}
}

func TestAuthTLSHandshake(t *testing.T) {
	af := newAuthFixture(t, false)
	// A client that does not trust the authority refuses the service.
	_, err := http.Get(af.https + "/healthz")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("client without the CA: %v, want an unknown authority", err)
	}
	// Plain HTTP to the TLS port gets no API answer.
	plain := strings.Replace(af.https, "https://", "http://", 1)
	if resp, err := http.Get(plain + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP to the TLS port answered 200")
		}
	}
}

// TestTLSReload: a renewed certificate is served after the reload, and a
// pair that does not load leaves the old one in use.
func TestTLSReload(t *testing.T) {
	af := newAuthFixture(t, false)
	serial := func() string {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(af.https, "https://"), af.clientTLS())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	// A new pair from the same authority, written over the files.
	renewed := testcerts.Renew(t, af.certs)
	if err := af.reloadTLS(); err != nil {
		t.Fatal(err)
	}
	if after := serial(); after == before || after != renewed {
		t.Fatalf("serial before %s, after %s, want the renewed %s", before, after, renewed)
	}
	os.WriteFile(af.certs.ServerKey, []byte("not a key"), 0o600)
	if err := af.reloadTLS(); err == nil {
		t.Fatal("a broken key reloaded")
	}
	if got := serial(); got != renewed {
		t.Fatalf("after a failed reload the service shows %s, want %s", got, renewed)
	}
}

func TestAuthMutualTLS(t *testing.T) {
	st := testdb.NewStore(t)
	testdb.MustMake(t, st, "db1", testdb.Options{Chunks: 3, Files: 1})
	certs := testcerts.Make(t)
	cfg, _, err := auth.TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey, ClientCA: certs.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	url := start(t, service.Config{Cache: cache.Config{Store: st, CacheDir: t.TempDir()}, HTTP: "127.0.0.1:0", TLS: cfg}).URL()
	pem, _ := os.ReadFile(certs.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	get := func(certs []tls.Certificate) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(url + api.DBPath("db1"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := get(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := get([]tls.Certificate{cert}); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
	// A certificate from another authority is refused.
	otherCerts := testcerts.Make(t)
	other, _ := tls.LoadX509KeyPair(otherCerts.ClientCert, otherCerts.ClientKey)
	if err := get([]tls.Certificate{other}); err == nil {
		t.Fatal("a client certificate of another authority was accepted")
	}
}

func TestAuthGRPC(t *testing.T) {
	af := newAuthFixture(t, false)
	conn, err := grpc.NewClient(af.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(af.clientTLS())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cc := chunkpb.NewChunkCacheClient(conn)
	a := af.db.Files[0].Addrs[0]
	calls := []struct {
		name string
		call func(ctx context.Context, db string) error
		want [4]codes.Code
	}{
		{"GetChunk", func(ctx context.Context, db string) error {
			_, err := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: db, Address: a[:]})
			return err
		}, [4]codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.PermissionDenied, codes.OK}},
		{"GetChunks", func(ctx context.Context, db string) error {
			s, err := cc.GetChunks(ctx, &chunkpb.GetChunksRequest{Db: db, Addresses: [][]byte{a[:]}})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}, [4]codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.PermissionDenied, codes.OK}},
		{"HasChunks", func(ctx context.Context, db string) error {
			_, err := cc.HasChunks(ctx, &chunkpb.HasChunksRequest{Db: db, Addresses: [][]byte{a[:]}})
			return err
		}, [4]codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.PermissionDenied, codes.OK}},
		{"Health", func(ctx context.Context, db string) error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}, [4]codes.Code{codes.OK, codes.OK, codes.OK, codes.OK}},
		{"Reflection", func(ctx context.Context, db string) error {
			s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
				return err
			}
			_, err = s.Recv()
			s.CloseSend()
			return err
		}, [4]codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.OK, codes.OK}},
	}
	for _, c := range calls {
		for i, tc := range tokenCases {
			ctx := context.Background()
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
			}
			if got := status.Code(c.call(ctx, "db1")); got != c.want[i] {
				t.Errorf("%s, %s token: %v, want %v", c.name, tc.name, got, c.want[i])
			}
		}
	}
	// Same refusal whether the database exists or not.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer other")
	_, e1 := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "db1", Address: a[:]})
	_, e2 := cc.GetChunk(ctx, &chunkpb.GetChunkRequest{Db: "nosuch", Address: a[:]})
	if status.Code(e1) != codes.PermissionDenied || e1.Error() != e2.Error() {
		t.Errorf("existing db: %v; missing db: %v; want the same refusal", e1, e2)
	}
}

// TestCacheViewTokens: the list shows only the token's databases, and
// dropping needs the database's token.
func TestCacheViewTokens(t *testing.T) {
	af := newAuthFixture(t, false)
	if code, body := af.do("GET", api.ChunkPath("db1", af.db.Files[0].Addrs[0]), "right", nil); code != 200 {
		t.Fatalf("a chunk: %d %s", code, body)
	}
	for token, want := range map[string]string{"right": "db1", "other": ""} {
		code, body := af.do("GET", api.DBsPath, token, nil)
		var dbs []api.DBSummary
		if code != 200 || json.Unmarshal(body, &dbs) != nil {
			t.Fatalf("%s: %d %s", token, code, body)
		}
		var names []string
		for _, d := range dbs {
			names = append(names, d.Name)
		}
		if strings.Join(names, ",") != want {
			t.Errorf("token %s lists %q, want %q", token, names, want)
		}
		code, body = af.do("GET", api.CachePath, token, nil)
		var sum api.CacheSummary
		if code != 200 || json.Unmarshal(body, &sum) != nil || sum.Databases != len(names) {
			t.Errorf("token %s: /v1/cache %d %s", token, code, body)
		}
	}
	for token, want := range map[string]int{"": 401, "other": 403, "right": 200} {
		if code, body := af.do("DELETE", api.DropCachePath("db1"), token, nil); code != want {
			t.Errorf("DELETE with token %q: %d %s, want %d", token, code, body, want)
		}
	}
	if code, _ := af.do("GET", api.CachePath, "", nil); code != 401 {
		t.Errorf("/v1/cache without a token: %d", code)
	}
}
