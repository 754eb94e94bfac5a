package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/internal/testcerts"
)

// TestServeTLSAndTokens runs "chunkd serve" with TLS and a token file and
// reads through it with "chunkd sql": the right token reads from the
// service over HTTPS and gRPC with TLS, another database's token reads
// from the store (the service refuses it), and SIGHUP re-reads the file.
func TestServeTLSAndTokens(t *testing.T) {
	file, storeURL := smallDB(t)
	certs := testcerts.Make(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("right s\nother x-*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, storeURL, t.TempDir(), "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--auth-tokens", tokens)
	https := strings.Replace(svc.http, "http://", "https://", 1)
	q := "SELECT Lang, count(*) FROM sentences GROUP BY Lang ORDER BY Lang"
	want := mustChunkd(t, "sql", "--file", file, "-q", q, "--format", "csv")

	for _, service := range []string{https, "grpcs://" + svc.grpcAddr} {
		// The right token, from the environment: every page from the
		// service (its directory not read, as from another host).
		out, stats, err := chunkdEnv(t, []string{"CHUNKD_TOKEN=right"}, "sql", "--store", storeURL, "--db", "s", "--service", service, "--service-dir", "none", "--ca-file", certs.CA, "-q", q, "--format", "csv", "--service-timeout", "10s")
		if err != nil || out != want {
			t.Fatalf("%s, right token: %v\n%s%s", service, err, out, stats)
		}
		if !strings.Contains(stats, "; store 0 chunks") || strings.Contains(stats, "service 0 chunks") {
			t.Fatalf("%s, right token: not read from the service: %s", service, stats)
		}
		// Another database's token, as a flag: the answer is the same, read
		// from the store (the service does not point this client at its
		// directory), and the client says why. (A long hedge delay: a
		// refusal that came after the store's answer would not be logged.)
		out, stats, err = chunkdEnv(t, nil, "sql", "--store", storeURL, "--db", "s", "--service", service, "--ca-file", certs.CA, "--token", "other", "-q", q, "--format", "csv", "--service-timeout", "10s")
		if err != nil || out != want {
			t.Fatalf("%s, other token: %v\n%s%s", service, err, out, stats)
		}
		if !strings.Contains(stats, "refused the client") || !strings.Contains(stats, "service 0 chunks") {
			t.Fatalf("%s, other token: %s", service, stats)
		}
		if strings.Contains(stats, "other") && strings.Contains(stats, "Bearer") {
			t.Fatalf("the client logged the token: %s", stats)
		}
		// Without the CA the client does not trust the service.
		_, stats, _ = chunkdEnv(t, []string{"CHUNKD_TOKEN=right"}, "sql", "--store", storeURL, "--db", "s", "--service", service, "-q", q)
		if !strings.Contains(stats, "service 0 chunks") {
			t.Fatalf("%s without the CA: %s", service, stats)
		}
	}

	// chunkd status speaks TLS and sends the token too; a token that may
	// not read "s" does not see it.
	out, errOut, err := chunkdEnv(t, []string{"CHUNKD_TOKEN=right"}, "status", "--service", https, "--ca-file", certs.CA)
	if err != nil || !strings.Contains(out, "\ns ") {
		t.Fatalf("status over TLS: %v\n%s%s", err, out, errOut)
	}
	if out, _, err := chunkdEnv(t, nil, "status", "--service", https, "--ca-file", certs.CA, "--token", "other"); err != nil || strings.Contains(out, "\ns ") {
		t.Fatalf("status with another database's token: %v\n%s", err, out)
	}
	if _, errOut, err := chunkd(t, "status", "--service", https, "--ca-file", certs.CA); err == nil || !strings.Contains(errOut, "bearer token") {
		t.Fatalf("status without a token: %v %q", err, errOut)
	}

	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	status := func(token string) int {
		req, _ := http.NewRequest("GET", https+api.DBPath("s"), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := status("right"); c != 200 {
		t.Fatalf("right token: %d", c)
	}
	// SIGHUP re-reads the file.
	if err := os.WriteFile(tokens, []byte("fresh s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(svc.log(), "token file re-read") || !strings.Contains(svc.log(), "TLS certificate re-read") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", svc.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, c2 := status("right"), status("fresh"); c != 401 || c2 != 200 {
		t.Fatalf("after SIGHUP: old token %d (want 401), new token %d (want 200)", c, c2)
	}
	if strings.Contains(svc.log(), "fresh") || strings.Contains(svc.log(), "right") {
		t.Fatalf("the service logged a token:\n%s", svc.log())
	}
	svc.stop()
}

func TestServeSecureFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-client-ca", "ca.pem"}, "--tls-client-ca needs --tls-cert"},
		{[]string{"--metrics-open"}, "--metrics-open needs --auth-tokens"},
		{[]string{"--auth-tokens", "/nonexistent/tokens"}, "token file"},
	} {
		args := append([]string{"serve", "--store", t.TempDir(), "--cache-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--grpc-listen", ""}, tc.args...)
		_, errOut, err := chunkd(t, args...)
		if err == nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %v, %q; want an error with %q", tc.args, err, errOut, tc.want)
		}
	}
}

func TestWarnExposed(t *testing.T) {
	for _, tc := range []struct {
		addr      string
		tls, toks bool
		want      string
	}{
		{"127.0.0.1:9460", false, false, ""},
		{"[::1]:9460", false, false, ""},
		{"localhost:9460", false, false, ""},
		{"0.0.0.0:9460", false, false, "neither TLS nor tokens"},
		{":9460", false, false, "neither TLS nor tokens"},
		{"10.1.2.3:9460", true, false, "no tokens"},
		{"10.1.2.3:9460", false, true, "no TLS"},
		{"10.1.2.3:9460", true, true, ""},
	} {
		var buf bytes.Buffer
		warnExposed(slog.New(slog.NewTextHandler(&buf, nil)), "HTTP", tc.addr, tc.tls, tc.toks)
		if got := buf.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s tls=%v tokens=%v: %q, want %q", tc.addr, tc.tls, tc.toks, got, tc.want)
		}
	}
}

// TestTokenFileReadableWarned: a token file other users can read is
// warned about when the service starts and when SIGHUP re-reads it.
func TestTokenFileReadableWarned(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tok s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "the token file can be read by other users; chmod 600 it"
	svc := startService(t, t.TempDir(), t.TempDir(), "--auth-tokens", tokens)
	if strings.Contains(svc.log(), warning) {
		t.Fatalf("a warning for a file of mode 600:\n%s", svc.log())
	}
	if err := os.Chmod(tokens, 0o644); err != nil {
		t.Fatal(err)
	}
	svc.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(svc.log(), "token file re-read") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", svc.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	svc.stop()
	if !strings.Contains(svc.log(), warning) || !strings.Contains(svc.log(), "mode=-rw-r--r--") {
		t.Fatalf("no warning after SIGHUP re-read a file of mode 644:\n%s", svc.log())
	}
	svc = startService(t, t.TempDir(), t.TempDir(), "--auth-tokens", tokens)
	svc.stop()
	if !strings.Contains(svc.log(), warning) {
		t.Fatalf("no warning at start for a file of mode 644:\n%s", svc.log())
	}
}
