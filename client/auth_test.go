package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testcerts"
	"github.com/chunkd/chunkd/internal/testdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serverTLS is a server configuration from the test authority's files;
// with mutual it asks for and checks a client certificate.
func serverTLS(t *testing.T, f testcerts.Files, mutual bool) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if mutual {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}

// TestServiceTLSAndToken reads through a service that speaks only TLS
// (with a client certificate) and counts the requests that carried the
// token: every request the client makes carries it, over HTTP and gRPC.
func TestServiceTLSAndToken(t *testing.T) {
	f := testcerts.Make(t)
	s := newStore(t)
	db := makeDB(t, s, "db1", testdb.Options{Files: 2, Chunks: 30})
	svc := newCache(t, s, cache.ReadThrough)
	var withToken, without atomic.Int64
	count := func(got string) bool {
		if got == "Bearer s3cret" {
			withToken.Add(1)
			return true
		}
		without.Add(1)
		return false
	}

	api := apiHandler(svc)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !count(r.Header.Get("Authorization")) {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	}))
	hs.TLS = serverTLS(t, f, true)
	hs.StartTLS()
	t.Cleanup(hs.Close)

	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) != 1 || !count(v[0]) {
			return status.Error(codes.Unauthenticated, "no token")
		}
		return nil
	}
	gs := grpcServer(svc, grpc.Creds(credentials.NewTLS(serverTLS(t, f, true))),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)

	for _, url := range []string{hs.URL, "grpcs://" + lis.Addr().String()} {
		t.Run(strings.Split(url, ":")[0], func(t *testing.T) {
			withToken.Store(0)
			without.Store(0)
			// No hedging: a slow handshake on a busy machine must not
			// send a read to the store.
			c := open(t, Options{Store: s, DB: "db1", Service: url, Token: "s3cret", CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, MemBytes: -1, ServiceTimeout: -1})
			all := db.All()
			getAll(t, c, db, all[:5])
			getMany(t, c, db, all)
			st := c.Stats()
			if st.Service.Chunks != int64(len(all)+5) || st.Store.Chunks != 0 {
				t.Fatalf("want every chunk from the service: %v", st)
			}
			if withToken.Load() != 6 || without.Load() != 0 {
				t.Fatalf("requests with the token %d, without %d; want 6 and 0", withToken.Load(), without.Load())
			}

			// Without the client certificate the handshake fails: the
			// client reads from the store and says why.
			c2 := open(t, Options{Store: s, DB: "db1", Service: url, Token: "s3cret", CAFile: f.CA, MemBytes: -1, ServiceTimeout: -1})
			getAll(t, c2, db, all[:1])
			if st := c2.Stats(); st.Service.Chunks != 0 || st.Store.Chunks != 1 || st.ServiceErrors == 0 {
				t.Fatalf("without a client certificate: %v", st)
			}
			// Without the CA the client does not trust the service.
			c3 := open(t, Options{Store: s, DB: "db1", Service: url, Token: "s3cret", CertFile: f.ClientCert, KeyFile: f.ClientKey, MemBytes: -1})
			getAll(t, c3, db, all[:1])
			if st := c3.Stats(); st.Service.Chunks != 0 || st.Store.Chunks != 1 {
				t.Fatalf("without the CA: %v", st)
			}
		})
	}
}

func TestServiceTLSOptionsChecked(t *testing.T) {
	s := newStore(t)
	makeDB(t, s, "db1", testdb.Options{Files: 1, Chunks: 3})
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Service: "http://127.0.0.1:1", CAFile: "ca.pem"}, "use https:// or grpcs://"},
		{Options{Service: "grpcs://127.0.0.1:1", CAFile: "/nonexistent/ca.pem"}, "CA file"},
		{Options{Service: "https://127.0.0.1:1", CertFile: "c.pem"}, "CertFile and KeyFile go together"},
	} {
		tc.o.Store, tc.o.DB, tc.o.Logger = s, "db1", quiet()
		_, err := Open(context.Background(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.o, err, tc.want)
		}
	}
}
