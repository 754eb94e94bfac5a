package store_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
)

func newFolder(t *testing.T) store.Store {
	t.Helper()
	s, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// atLeast fails t if fn takes less than min. (No upper bounds: the
// machine may be slow.)
func atLeast(t *testing.T, what string, min time.Duration, fn func() error) {
	t.Helper()
	start := time.Now()
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if d := time.Since(start); d < min {
		t.Errorf("%s took %v, want at least %v", what, d, min)
	}
}

func TestWithLatency(t *testing.T) {
	const rtt = 30 * time.Millisecond
	ctx := context.Background()
	base := newFolder(t)
	s := store.WithLatency(base, rtt, 0)
	if s.String() != base.String() {
		t.Errorf("String() = %q, want the wrapped store's %q", s.String(), base.String())
	}
	atLeast(t, "Put", rtt, func() error { return s.Put(ctx, "k", []byte("hello")) })
	atLeast(t, "Get", rtt, func() error { _, err := s.Get(ctx, "k"); return err })
	atLeast(t, "Head", rtt, func() error { _, err := s.Head(ctx, "k"); return err })
	atLeast(t, "ReadAt", rtt, func() error { _, err := s.ReadAt(ctx, "k", make([]byte, 2), 1); return err })
	atLeast(t, "List", rtt, func() error { _, err := s.List(ctx, ""); return err })
	atLeast(t, "PutIf", rtt, func() error { _, err := s.PutIf(ctx, "k2", []byte("x"), ""); return err })
	atLeast(t, "Open", rtt, func() error {
		rc, _, err := s.Open(ctx, "k")
		if err == nil {
			rc.Close()
		}
		return err
	})
	atLeast(t, "Delete", rtt, func() error { return s.Delete(ctx, "k") })
	// Errors of the wrapped store come through.
	if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
}

func TestWithLatencyBandwidth(t *testing.T) {
	ctx := context.Background()
	s := store.WithLatency(newFolder(t), 0, 1_000_000) // 1 MB/s
	data := make([]byte, 200_000)
	atLeast(t, "Put of 200 kB at 1 MB/s", 200*time.Millisecond, func() error { return s.Put(ctx, "k", data) })
	atLeast(t, "Get of 200 kB at 1 MB/s", 200*time.Millisecond, func() error { _, err := s.Get(ctx, "k"); return err })
	atLeast(t, "ReadAt of 100 kB at 1 MB/s", 100*time.Millisecond, func() error {
		_, err := s.ReadAt(ctx, "k", make([]byte, 100_000), 0)
		return err
	})
	atLeast(t, "streaming 200 kB at 1 MB/s", 200*time.Millisecond, func() error {
		rc, _, err := s.Open(ctx, "k")
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(io.Discard, rc)
		if n != int64(len(data)) {
			t.Errorf("stream gave %d bytes", n)
		}
		return err
	})
}

func TestWithLatencyCancel(t *testing.T) {
	s := store.WithLatency(newFolder(t), time.Hour, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := s.Put(ctx, "k", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put with an hour's latency and a 20ms deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := s.Head(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Head: %v", err)
	}
}

func TestOpenLatencyParams(t *testing.T) {
	ctx := context.Background()
	dir := filepath.ToSlash(t.TempDir())
	// The folder backend refuses query parameters, so this also shows
	// they were removed before it saw the URL.
	s, err := store.Open(ctx, "file://"+dir+"?latency=40ms&bandwidth=100MB")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if strings.Contains(s.String(), "latency") {
		t.Errorf("String() = %q", s.String())
	}
	atLeast(t, "Head with latency=40ms", 40*time.Millisecond, func() error {
		_, err := s.Head(ctx, "missing")
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	for _, bad := range []string{"?latency=soon", "?latency=-1s", "?bandwidth=fast", "?bandwidth=0", "?latency=1ms&bandwidth=-5MB"} {
		if s, err := store.Open(ctx, "file://"+dir+bad); err == nil {
			s.Close()
			t.Errorf("Open(%s) succeeded", bad)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for in, want := range map[string]int64{
		"100MB": 100e6, "100mb/s": 100e6, "12.5MiB": 12.5 * (1 << 20), "1G": 1e9, "2GiB": 2 << 30,
		"65536": 65536, "10KB": 10e3, "3k": 3e3, "7B": 7, " 1 MB ": 1e6,
	} {
		got, err := store.ParseBandwidth(in)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MB", "-1MB", "0", "fast", "1TB", "1e30"} {
		if got, err := store.ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q) = %d, want an error", in, got)
		}
	}
}

func TestCounting(t *testing.T) {
	ctx := context.Background()
	c := store.NewCounting(newFolder(t))
	c.Put(ctx, "a", []byte("12345"))
	c.Get(ctx, "a")
	c.ReadAt(ctx, "a", make([]byte, 2), 1)
	c.Head(ctx, "a")
	c.List(ctx, "")
	v, _ := c.PutIf(ctx, "b", []byte("xyz"), "")
	c.PutIf(ctx, "b", []byte("xyz"), v)
	rc, _, err := c.Open(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	c.Delete(ctx, "a")
	c.Get(ctx, "a") // not found: still a request
	if got, want := c.Requests(), int64(10); got != want {
		t.Errorf("Requests() = %d, want %d", got, want)
	}
	if got, want := c.Bytes(), int64(5+5+2+3+3+5); got != want {
		t.Errorf("Bytes() = %d, want %d", got, want)
	}
	c.Reset()
	if c.Requests() != 0 || c.Bytes() != 0 {
		t.Errorf("after Reset: %d requests, %d bytes", c.Requests(), c.Bytes())
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"s3://b/p?endpoint=http://x&access_key=ak&secret_key=sk": "s3://b/p?endpoint=http://x&access_key=ak&secret_key=xxxxx",
		"s3://b?session_token=tok&region=r":                      "s3://b?session_token=xxxxx&region=r",
		"s3://user:pass@b/p":                                     "s3://user:xxxxx@b/p",
		"/plain/path":                                            "/plain/path",
	} {
		if got := store.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"s3://b/p?endpoint=http://x&access_key=ak&secret_key=sk": "secret_key",
		"s3://b?session_token=tok&region=r":                      "session_token",
		"s3://user:pass@b/p?token=t":                             "password token",
		"s3://b/p?access_key=ak&secret_key=":                     "",
		"/plain/path":                                            "",
	} {
		if got := strings.Join(store.Secrets(in), " "); got != want {
			t.Errorf("Secrets(%q) = %q, want %q", in, got, want)
		}
	}
	_, err := store.Open(context.Background(), "nosuch://b?secret_key=hunter2")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of an unknown scheme: %v; want an error without the secret", err)
	}
}
