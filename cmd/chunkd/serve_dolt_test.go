package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/testcerts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var doltAddrLine = regexp.MustCompile(`msg=listening .* dolt=(\S+)`)

// doltRPC dials the Dolt remote a running service logged.
func (s *serveProc) doltRPC() (remotesapi.ChunkStoreServiceClient, string) {
	s.t.Helper()
	m := doltAddrLine.FindStringSubmatch(s.log())
	if m == nil {
		s.t.Fatalf("no dolt address in the listening line:\n%s", s.log())
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return remotesapi.NewChunkStoreServiceClient(conn), m[1]
}

// TestServeDoltRemote: serve carries the Dolt remote on its gRPC listener,
// or on --dolt-listen, and its downloads on the HTTP listener.
func TestServeDoltRemote(t *testing.T) {
	storeDir := t.TempDir()
	if err := os.CopyFS(filepath.Join(storeDir, "org", "db"), os.DirFS(doltfixtures.Path("remote-archive"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"shared", nil},
		{"dedicated", []string{"--dolt-listen", "127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startService(t, storeDir, t.TempDir(), tc.extra...)
			rpc, addr := s.doltRPC()
			if (addr == s.grpcAddr) != (tc.extra == nil) {
				t.Errorf("dolt remote at %s, gRPC at %s", addr, s.grpcAddr)
			}
			list, err := rpc.ListTableFiles(context.Background(), &remotesapi.ListTableFilesRequest{RepoPath: "org/db"})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range list.TableFileInfo {
				if !strings.HasPrefix(f.Url, s.http+"/dolt/v1/org/db/") {
					t.Errorf("url %s is not on the HTTP listener %s", f.Url, s.http)
				}
				resp, err := http.Get(f.Url)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %s", f.Url, resp.Status)
				}
			}
			s.stop()
		})
	}
	t.Run("off", func(t *testing.T) {
		s := startService(t, storeDir, t.TempDir(), "--dolt-remote=false")
		if m := doltAddrLine.FindStringSubmatch(s.log()); m == nil || m[1] != "-" {
			t.Errorf("--dolt-remote=false: listening line says %v", m)
		}
		resp, err := http.Get(s.http + "/dolt/v1/org/db/" + strings.Repeat("0", 32))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("--dolt-remote=false: a download answered %s", resp.Status)
		}
		s.stop()
	})
}

// tokenCreds sends a token the way a Dolt client sends
// DOLT_REMOTE_PASSWORD (Basic, with --user) or as a bearer token.
type tokenCreds struct{ header string }

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": c.header}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// TestServeDoltRemoteSecure: with TLS and tokens, the Dolt remote takes
// Dolt's Basic credentials and bearer tokens, checks the grant against the
// database a repository resolves to, and hands out https URLs signed for
// the download, which are refused unsigned or altered.
func TestServeDoltRemoteSecure(t *testing.T) {
	storeDir := t.TempDir()
	for _, db := range []string{"org/db", "solo"} {
		if err := os.CopyFS(filepath.Join(storeDir, filepath.FromSlash(db)), os.DirFS(doltfixtures.Path("remote-classic"))); err != nil {
			t.Fatal(err)
		}
	}
	certs := testcerts.Make(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("orgtoken org/*\nsolotoken solo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startService(t, storeDir, t.TempDir(), "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--auth-tokens", tokens)
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tlsCfg := &tls.Config{RootCAs: pool}
	dial := func(header string) remotesapi.ChunkStoreServiceClient {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}
		if header != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{header}))
		}
		conn, err := grpc.NewClient(s.grpcAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return remotesapi.NewChunkStoreServiceClient(conn)
	}
	basic := func(token string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:"+token))
	}
	ctx := context.Background()
	list := func(c remotesapi.ChunkStoreServiceClient, repo string) (*remotesapi.ListTableFilesResponse, error) {
		return c.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: repo})
	}

	if _, err := list(dial(""), "org/db"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}
	for _, tc := range []struct {
		header, repo string
		code         codes.Code
	}{
		{"Bearer orgtoken", "org/db", codes.OK},
		{basic("orgtoken"), "org/db", codes.OK},
		{basic("solotoken"), "x/solo", codes.OK}, // resolves to solo, which it grants
		{basic("solotoken"), "org/db", codes.PermissionDenied},
		{basic("orgtoken"), "org/solo", codes.NotFound}, // org/solo is granted but missing; solo is not granted
		{basic("orgtoken"), "org/nodb", codes.NotFound},
		{basic("wrong"), "org/db", codes.Unauthenticated},
	} {
		resp, err := list(dial(tc.header), tc.repo)
		if status.Code(err) != tc.code {
			t.Errorf("%s for %s: %v, want %s", tc.header, tc.repo, err, tc.code)
			continue
		}
		if err != nil {
			continue
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
		get := func(url string) int {
			resp, err := hc.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, f := range resp.TableFileInfo {
			u, err := url.Parse(f.Url)
			if err != nil {
				t.Fatal(err)
			}
			if u.Scheme != "https" || u.Query().Get("sig") == "" {
				t.Errorf("url %s: want https and signed", f.Url)
			}
			if c := get(f.Url); c != http.StatusOK {
				t.Errorf("GET %s: %d", f.Url, c)
			}
			unsigned := *u
			unsigned.RawQuery = ""
			other := *u
			other.Path = strings.Replace(u.Path, "/dolt/v1/"+strings.TrimPrefix(tc.repo, "x/")+"/", "/dolt/v1/elsewhere/", 1)
			for _, bad := range []string{unsigned.String(), other.String(), f.Url[:len(f.Url)-2]} {
				if c := get(bad); c != http.StatusForbidden {
					t.Errorf("GET %s: %d, want 403", bad, c)
				}
			}
		}
	}
	s.stop()
}
