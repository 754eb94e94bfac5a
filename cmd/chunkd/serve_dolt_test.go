package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var doltAddrLine = regexp.MustCompile(`msg=listening .* dolt=(\S+)`)

// doltRPC dials the Dolt remote a running service logged.
func (s *service) doltRPC() (remotesapi.ChunkStoreServiceClient, string) {
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
		s := startService(t, storeDir, t.TempDir(), "--dolt=false")
		if m := doltAddrLine.FindStringSubmatch(s.log()); m == nil || m[1] != "-" {
			t.Errorf("--dolt=false: listening line says %v", m)
		}
		resp, err := http.Get(s.http + "/dolt/v1/org/db/" + strings.Repeat("0", 32))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("--dolt=false: a download answered %s", resp.Status)
		}
		s.stop()
	})
}
