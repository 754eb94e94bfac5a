package s3test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestMain(m *testing.M) { Main(m) }

func TestStartStop(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") {
		t.Errorf("Endpoint = %q, want a loopback URL", s.Endpoint)
	}
	u := s.Bucket(t, "TestStartStop/Sub Test")
	if !strings.HasPrefix(u, "s3://t-teststartstop-sub-test-") || !strings.Contains(u, "secret_key=") {
		t.Errorf("Bucket URL = %q", u)
	}
	ctx := context.Background()
	buckets, err := s.client.ListBuckets(ctx)
	if err != nil || len(buckets) != 1 {
		t.Errorf("ListBuckets = %v, %v; want the one bucket", buckets, err)
	}
	if _, err := s.client.PutObject(ctx, buckets[0].Name, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Errorf("PutObject: %v", err)
	}
	s.Stop()
	s.Stop() // twice is fine
	client := &http.Client{Timeout: time.Second}
	if resp, err := client.Get(s.Endpoint + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Errorf("server still answers after Stop")
	}
}

func TestShared(t *testing.T) {
	a, b := Shared(t), Shared(t)
	if a != b {
		t.Error("Shared started two servers")
	}
}

func TestBinaryFromEnv(t *testing.T) {
	t.Setenv(EnvBinary, filepath.Join(t.TempDir(), "no-minio-here"))
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Errorf("Binary() with a missing %s: %v", EnvBinary, err)
	}
	bin := filepath.Join(t.TempDir(), "minio")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	t.Setenv(EnvBinary, bin)
	if got, err := Binary(); err != nil || got != bin {
		t.Errorf("Binary() = %q, %v; want %q", got, err, bin)
	}
}

// A server that never gets healthy is reported with its output.
func TestStartFailure(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "minio")
	os.WriteFile(bin, []byte("#!/bin/sh\necho pretending to be minio: $@\nexit 3\n"), 0o755)
	_, err := start(bin, t.TempDir(), false)
	if err == nil || !strings.Contains(err.Error(), "pretending to be minio: server --address 127.0.0.1:") {
		t.Errorf("start of a failing binary: %v; want an error with its output", err)
	}
}

func TestBucketName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, name := range []string{"TestX", "Test/Sub_Name with spaces", strings.Repeat("VeryLong", 20), "---", "ÜNÏ/ÇÖDÉ"} {
		b := bucketName(name, 123)
		if !valid.MatchString(b) || strings.Contains(b, "--") {
			t.Errorf("bucketName(%q) = %q, not a valid bucket name", name, b)
		}
	}
}
