package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/internal/s3test"
	"github.com/chunkd/chunkd/internal/testnet"
	"github.com/chunkd/chunkd/store"
	s3store "github.com/chunkd/chunkd/store/s3"
	"github.com/chunkd/chunkd/store/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func open(t *testing.T, rawURL string) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConfigFile: region and endpoint come from the AWS config file's
// profile when neither the URL nor the environment gives them.
func TestConfigFile(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config")
	err := os.WriteFile(cfgFile, []byte("[default]\nregion = eu-west-1\n\n[profile other]\nregion = ap-south-2\nendpoint_url = http://127.0.0.1:9999\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", cfgFile)
	parse := func(raw string) s3store.Config {
		t.Helper()
		u, _ := url.Parse(raw)
		cfg, err := s3store.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := parse("s3://b/p"); cfg.Region != "eu-west-1" || cfg.Endpoint != "" {
		t.Errorf("default profile: region %q endpoint %q", cfg.Region, cfg.Endpoint)
	}
	t.Setenv("AWS_PROFILE", "other")
	if cfg := parse("s3://b/p"); cfg.Region != "ap-south-2" || cfg.Endpoint != "http://127.0.0.1:9999" || !cfg.PathStyle {
		t.Errorf("profile other: %+v", cfg)
	}
	t.Setenv("AWS_REGION", "us-west-2")
	if cfg := parse("s3://b/p?region=sa-east-1"); cfg.Region != "sa-east-1" {
		t.Errorf("the URL's region loses to %q", cfg.Region)
	}
	if cfg := parse("s3://b/p"); cfg.Region != "us-west-2" {
		t.Errorf("the environment's region loses to %q", cfg.Region)
	}
}

func TestContract(t *testing.T) {
	srv := s3test.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(context.Background(), srv.Bucket(t, t.Name()))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// The same, with the store under a prefix of a bucket that holds other
// objects too.
func TestContractPrefix(t *testing.T) {
	srv := s3test.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		bucket := srv.Bucket(t, t.Name())
		other := open(t, bucket)
		for _, k := range []string{"outside", "pre", "pre-x/y", "prefix"} {
			if err := other.Put(context.Background(), k, []byte("not in the store")); err != nil {
				t.Fatal(err)
			}
		}
		u, _ := url.Parse(bucket)
		u.Path = "/pre/fix"
		s, err := store.Open(context.Background(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestWrongCredentials(t *testing.T) {
	srv := s3test.Shared(t)
	good := srv.Bucket(t, t.Name())
	if err := open(t, good).Put(context.Background(), "obj", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(q url.Values){
		"secret":     func(q url.Values) { q.Set("secret_key", "wrong-secret-key") },
		"access key": func(q url.Values) { q.Set("access_key", "nobody") },
	} {
		t.Run(name, func(t *testing.T) {
			u, _ := url.Parse(good)
			q := u.Query()
			change(q)
			u.RawQuery = q.Encode()
			s := open(t, u.String())
			ctx := context.Background()
			_, err := s.Get(ctx, "obj")
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrAccessDenied) {
					t.Errorf("%s with wrong credentials: %v, want ErrAccessDenied", what, err)
				}
				if err != nil && strings.Contains(err.Error(), "wrong-secret-key") {
					t.Errorf("error shows the secret: %v", err)
				}
			}
			check("Get", err)
			t.Logf("Get: %v", err)
			check("Put", s.Put(ctx, "obj", []byte("y")))
			_, err = s.Head(ctx, "obj")
			check("Head", err)
			_, err = s.List(ctx, "")
			check("List", err)
			_, err = s.ReadAt(ctx, "obj", make([]byte, 1), 0)
			check("ReadAt", err)
			_, err = s.PutIf(ctx, "obj", []byte("z"), "")
			check("PutIf", err)
		})
	}
}

func TestMissingBucket(t *testing.T) {
	srv := s3test.Shared(t)
	s := open(t, srv.URL("no-such-bucket", ""))
	_, err := s.Get(context.Background(), "obj")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("Get from a missing bucket: %v, want ErrNotFound naming the bucket", err)
	}
	t.Logf("Get: %v", err)
}

func TestErrorMessages(t *testing.T) {
	srv := s3test.Shared(t)
	rawURL := srv.Bucket(t, t.Name())
	u, _ := url.Parse(rawURL)
	u.Path = "/p"
	s := open(t, u.String())
	_, err := s.Get(context.Background(), "key")
	if want := "s3 get s3://" + u.Host + "/p/key: no such object"; err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if strings.Contains(s.String(), srv.SecretKey) {
		t.Errorf("String() = %q shows the secret key", s.String())
	}
	if _, err := store.Open(context.Background(), rawURL+"&bogus=1"); err == nil || strings.Contains(err.Error(), srv.SecretKey) {
		t.Errorf("Open with an unknown parameter: %v; want an error without the secret", err)
	}
}

func TestUnreachable(t *testing.T) {
	const timeout = 2 * time.Second
	s := open(t, "s3://bucket?endpoint=http://"+testnet.Refused(t)+"&access_key=a&secret_key=b&timeout="+timeout.String())
	ctx := context.Background()
	start := time.Now()
	_, err := s.Get(ctx, "obj")
	elapsed := time.Since(start)
	if !errors.Is(err, store.ErrUnreachable) {
		t.Errorf("Get from a closed port: %v, want ErrUnreachable", err)
	}
	if elapsed > timeout+5*time.Second {
		t.Errorf("Get from a closed port took %v, timeout is %v", elapsed, timeout)
	}
	t.Logf("Get after %v: %v", elapsed, err)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrUnreachable) {
			t.Errorf("%s from a closed port: %v, want ErrUnreachable", what, err)
		}
	}
	check("Put", s.Put(ctx, "obj", []byte("x")))
	_, err = s.List(ctx, "")
	check("List", err)
	_, err = s.PutIf(ctx, "obj", []byte("x"), "")
	check("PutIf", err)
	_, _, err = s.Open(ctx, "obj")
	check("Open", err)
}

func TestTimeout(t *testing.T) {
	s := open(t, "s3://bucket?endpoint=http://"+testnet.Silent(t)+"&access_key=a&secret_key=b&timeout=500ms")
	for _, op := range []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, "obj"); return err }},
		{"Head", func(ctx context.Context) error { _, err := s.Head(ctx, "obj"); return err }},
		{"Open", func(ctx context.Context) error { _, _, err := s.Open(ctx, "obj"); return err }},
		{"PutIf", func(ctx context.Context) error { _, err := s.PutIf(ctx, "obj", []byte("x"), ""); return err }},
	} {
		start := time.Now()
		err := op.fn(context.Background())
		elapsed := time.Since(start)
		if !errors.Is(err, store.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s from a silent server: %v, want ErrUnreachable and DeadlineExceeded", op.name, err)
		}
		if elapsed < 500*time.Millisecond || elapsed > 10*time.Second {
			t.Errorf("%s from a silent server gave up after %v, timeout 500ms", op.name, elapsed)
		}
	}
}

func TestCancel(t *testing.T) {
	s := open(t, "s3://bucket?endpoint=http://"+testnet.Silent(t)+"&access_key=a&secret_key=b&timeout=1m")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.ReadAt(ctx, "obj", make([]byte, 10), 0)
	elapsed := time.Since(start)
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnreachable) {
		t.Errorf("cancelled ReadAt: %v, want context.Canceled", err)
	}
	if elapsed > 10*time.Second {
		t.Errorf("cancelled ReadAt returned after %v", elapsed)
	}
	// A deadline of the caller's is a timeout too.
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = s.Head(ctx, "obj")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, store.ErrUnreachable) {
		t.Errorf("Head past the caller's deadline: %v, want DeadlineExceeded and ErrUnreachable", err)
	}
}

// A cancelled context stops a stream being read, too.
func TestCancelStream(t *testing.T) {
	srv := s3test.Shared(t)
	s := open(t, srv.Bucket(t, t.Name()))
	if err := s.Put(context.Background(), "obj", make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc, _, err := s.Open(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Read(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, rc)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("reading a stream after cancel: %v, want context.Canceled", err)
	}
}

func TestLatency(t *testing.T) {
	srv := s3test.Shared(t)
	rawURL := srv.Bucket(t, t.Name())
	fast := open(t, rawURL)
	slow := open(t, rawURL+"&latency=50ms&bandwidth=1MB")
	ctx := context.Background()
	if err := fast.Put(ctx, "obj", make([]byte, 100_000)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := slow.Head(ctx, "obj"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("Head with latency=50ms took %v", d)
	}
	start = time.Now()
	if _, err := slow.Get(ctx, "obj"); err != nil {
		t.Fatal(err)
	}
	// 50 ms, plus 100 kB at 1 MB/s.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("Get of 100 kB at 1 MB/s with latency=50ms took %v", d)
	}
	if s := slow.String(); strings.Contains(s, "latency=") || !strings.HasPrefix(s, "s3://") {
		t.Errorf("String() = %q", s)
	}
}

func TestParseURL(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	parse := func(s string) (s3store.Config, error) {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return s3store.ParseURL(u)
	}
	cfg, err := parse("s3://b/some/prefix?endpoint=http://127.0.0.1:9000&timeout=5s&retries=2&access_key=k&secret_key=s")
	if err != nil {
		t.Fatal(err)
	}
	want := s3store.Config{Bucket: "b", Prefix: "some/prefix", Endpoint: "http://127.0.0.1:9000", PathStyle: true,
		AccessKey: "k", SecretKey: "s", Timeout: 5 * time.Second, Retries: 2}
	if cfg != want {
		t.Errorf("ParseURL = %+v, want %+v", cfg, want)
	}
	cfg, err = parse("s3://b?retries=0&timeout=0")
	if err != nil || cfg.Retries >= 0 || cfg.Timeout >= 0 || cfg.PathStyle || cfg.Endpoint != "" {
		t.Errorf("ParseURL(no endpoint, no retries, no timeout) = %+v, %v", cfg, err)
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1234")
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-3")
	cfg, err = parse("s3://b?path_style=false")
	if err != nil || cfg.Endpoint != "http://127.0.0.1:1234" || cfg.Region != "eu-west-3" || cfg.PathStyle {
		t.Errorf("ParseURL with env = %+v, %v", cfg, err)
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5678")
	t.Setenv("AWS_REGION", "ap-south-1")
	cfg, err = parse("s3://b")
	if err != nil || cfg.Endpoint != "http://127.0.0.1:5678" || cfg.Region != "ap-south-1" || !cfg.PathStyle {
		t.Errorf("ParseURL with env = %+v, %v", cfg, err)
	}
	for _, bad := range []string{"s3:///prefix", "s3://b?nope=1", "s3://b?timeout=x", "s3://b?retries=-1",
		"s3://b?path_style=maybe", "s3://user:pw@b", "s3://b?secret_key=s"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("ParseURL(%q) succeeded", bad)
		} else if strings.Contains(err.Error(), "pw@") {
			t.Errorf("error shows a password: %v", err)
		}
	}
	if _, err := s3store.New(s3store.Config{Bucket: "b", Endpoint: "ftp://x"}); err == nil {
		t.Error("New with an ftp endpoint succeeded")
	}
}

// Credentials come from the environment when the URL has none.
func TestEnvCredentials(t *testing.T) {
	srv := s3test.Shared(t)
	rawURL := srv.Bucket(t, t.Name())
	u, _ := url.Parse(rawURL)
	q := u.Query()
	q.Del("access_key")
	q.Del("secret_key")
	q.Del("endpoint")
	u.RawQuery = q.Encode()
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s := open(t, u.String())
	if err := s.Put(context.Background(), "obj", []byte("x")); err != nil {
		t.Fatalf("Put with credentials from the environment: %v", err)
	}
	// Anonymous requests are refused.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	s = open(t, u.String())
	if _, err := s.Get(context.Background(), "obj"); !errors.Is(err, store.ErrAccessDenied) {
		t.Errorf("anonymous Get: %v, want ErrAccessDenied", err)
	}
}

// faultProxy forwards requests to an S3 endpoint. For the first request
// that match accepts, it forwards the request and then breaks the
// connection: before any answer when cut < 0, else after cut bytes of the
// body. It returns the proxy's URL and how many faults it caused.
func faultProxy(t *testing.T, endpoint string, match func(r *http.Request) bool, cut int64) (string, *atomic.Int32) {
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var faults atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = target.Scheme, target.Host
		out.Host = r.Host // the request was signed for the proxy's host
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		fault := match(r) && faults.CompareAndSwap(0, 1)
		if fault && cut < 0 {
			panic(http.ErrAbortHandler) // drop the connection unanswered
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		if fault {
			io.CopyN(w, resp.Body, cut)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // cut the body short
		}
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &faults
}

// viaProxy returns a store URL like rawURL but with another endpoint.
func viaProxy(rawURL, endpoint string) string {
	u, _ := url.Parse(rawURL)
	q := u.Query()
	q.Set("endpoint", endpoint)
	u.RawQuery = q.Encode()
	return u.String()
}

// A conditional PUT that succeeded but whose answer was lost is retried;
// the retry's 412 must not be reported as losing the race.
func TestPutIfLostResponse(t *testing.T) {
	srv := s3test.Shared(t)
	rawURL := srv.Bucket(t, t.Name())
	conditionalPut := func(r *http.Request) bool {
		return r.Method == http.MethodPut && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "")
	}
	proxy, dropped := faultProxy(t, srv.Endpoint, conditionalPut, -1)
	s := open(t, viaProxy(rawURL, proxy))
	ctx := context.Background()

	v, err := s.PutIf(ctx, "m", []byte("first"), "")
	if dropped.Load() != 1 {
		t.Fatal("the proxy dropped no response")
	}
	if err != nil {
		t.Fatalf("PutIf create with a lost response: %v", err)
	}
	info, err := s.Head(ctx, "m")
	if err != nil || info.Version != v {
		t.Fatalf("Head = %+v, %v; want version %s", info, err, v)
	}
	// And when the object really changed, the retry still loses.
	dropped.Store(0)
	if _, err := s.PutIf(ctx, "m", []byte("second"), v); err != nil {
		t.Fatalf("PutIf replace with a lost response: %v", err)
	}
	if _, err := s.PutIf(ctx, "m", []byte("third"), v); !errors.Is(err, store.ErrPrecondition) {
		t.Errorf("PutIf with a stale version: %v, want ErrPrecondition", err)
	}
}

// A response body cut short is read again, from where it broke off.
func TestCutBody(t *testing.T) {
	srv := s3test.Shared(t)
	rawURL := srv.Bucket(t, t.Name())
	ctx := context.Background()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := open(t, rawURL).Put(ctx, "obj", data); err != nil {
		t.Fatal(err)
	}
	isGet := func(r *http.Request) bool { return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/obj") }

	proxy, faults := faultProxy(t, srv.Endpoint, isGet, 1000)
	s := open(t, viaProxy(rawURL, proxy))
	p := make([]byte, 500_000)
	n, err := s.ReadAt(ctx, "obj", p, 100_000)
	if faults.Load() != 1 {
		t.Fatal("the proxy cut no body")
	}
	if err != nil || n != len(p) || !bytes.Equal(p, data[100_000:600_000]) {
		t.Errorf("ReadAt through a cut body = %d, %v", n, err)
	}
	// Past the end, after a cut.
	faults.Store(0)
	n, err = s.ReadAt(ctx, "obj", p, int64(len(data))-300_000)
	if faults.Load() != 1 || !errors.Is(err, io.ErrUnexpectedEOF) || n != 300_000 {
		t.Errorf("ReadAt past the end through a cut body = %d, %v (%d faults)", n, err, faults.Load())
	}
	faults.Store(0)
	got, err := s.Get(ctx, "obj")
	if faults.Load() != 1 || err != nil || !bytes.Equal(got, data) {
		t.Errorf("Get through a cut body = %d bytes, %v (%d faults)", len(got), err, faults.Load())
	}
	// With no retries allowed, the break shows.
	faults.Store(0)
	s = open(t, viaProxy(rawURL, proxy)+"&retries=0")
	_, err = s.ReadAt(ctx, "obj", p, 0)
	if !errors.Is(err, store.ErrUnreachable) {
		t.Errorf("ReadAt through a cut body without retries: %v, want ErrUnreachable", err)
	}
	t.Logf("without retries: %v", err)
}

// Objects too big for one PUT are uploaded in parts; their ETags (and so
// versions) differ in form, but PutIf and ranged reads work the same.
func TestLargeMultipart(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	srv := s3test.Shared(t)
	s := open(t, srv.Bucket(t, t.Name()))
	ctx := context.Background()
	data := make([]byte, 40<<20)
	for i := range data {
		data[i] = byte(i>>20) ^ byte(i)
	}
	if err := s.Put(ctx, "big", data); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(ctx, "big")
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Head = %+v, %v", info, err)
	}
	t.Logf("version of a multipart object: %s", info.Version)
	p := make([]byte, 3<<20)
	off := int64(15 << 20) // across the first part's end
	if n, err := s.ReadAt(ctx, "big", p, off); err != nil || n != len(p) || !bytes.Equal(p, data[off:off+int64(len(p))]) {
		t.Errorf("ReadAt across parts = %d, %v", n, err)
	}
	if _, err := s.PutIf(ctx, "big", []byte("small now"), info.Version); err != nil {
		t.Errorf("PutIf with a multipart object's version: %v", err)
	}
}
