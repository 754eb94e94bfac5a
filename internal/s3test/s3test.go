// Package s3test runs a real MinIO server for tests of S3 code.
//
// The server is the minio binary named by the environment variable
// CHUNKD_MINIO, else "minio" on PATH, else $(go env GOPATH)/bin/minio. If
// there is none, the tests that need one are skipped, or fail when
// CHUNKD_REQUIRE_S3=1. Get one with
//
//	go install github.com/minio/minio@latest
//
// Servers listen on 127.0.0.1 only and keep their data in a temporary
// directory.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Environment variables read by this package.
const (
	// EnvBinary names the minio binary to run.
	EnvBinary = "CHUNKD_MINIO"
	// EnvRequire, set to 1, makes a missing binary fail tests instead of
	// skipping them.
	EnvRequire = "CHUNKD_REQUIRE_S3"
)

// Region is the region the servers claim to be in.
const Region = "us-east-1"

// startTimeout bounds the wait for a server to answer its health check.
const startTimeout = 30 * time.Second

// Server is a running MinIO server.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:PORT.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string

	dir    string // holds data and certs
	rmDir  bool   // dir is ours to remove
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed when the process has exited
	client *minio.Client
	stop   sync.Once
}

// Start starts a server for t and stops it when t ends. It skips t (or,
// with CHUNKD_REQUIRE_S3=1, fails it) if there is no minio binary.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	s, err := start(bin, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Shared returns a server shared by all the tests of the package, starting
// it on first use. It skips t like Start does. Call StopShared when the
// tests are done, most simply by having TestMain call Main:
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
// (On Linux the server is killed when the test process dies anyway.)
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		dir, err := os.MkdirTemp("", "chunkd-minio-")
		if err != nil {
			shared.err = err
		} else if shared.srv, shared.err = start(bin, dir, true); shared.err != nil {
			os.RemoveAll(dir)
		}
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// StopShared stops the shared server, if one was started.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.Stop()
		shared.srv = nil
	}
}

// Main runs a package's tests and then stops the shared server; call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// Binary returns the path of the minio binary to use, or an error saying
// how to get one.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "minio")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("no minio binary: set " + EnvBinary + "=/path/to/minio, put minio on PATH, " +
		"or run `go install github.com/minio/minio@latest`")
}

func requireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%v (%s=1 requires the S3 tests)", err, EnvRequire)
		}
		t.Skipf("skipping S3 test: %v", err)
	}
	return bin
}

// start runs a server keeping its files in dir, retrying if another
// process took its ports first.
func start(bin, dir string, rmDir bool) (*Server, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var s *Server
		s, err = startOnce(bin, dir, rmDir)
		if err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startOnce(bin, dir string, rmDir bool) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 8)
	rand.Read(secret)
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		AccessKey: "chunkdtest",
		SecretKey: "chunkd-test-secret-" + hex.EncodeToString(secret),
		dir:       dir,
		rmDir:     rmDir,
		out:       &syncBuffer{},
		exited:    make(chan struct{}),
	}
	data, certs := filepath.Join(dir, "data"), filepath.Join(dir, "certs")
	for _, d := range []string{data, certs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	s.cmd = exec.Command(bin, "server",
		"--address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--console-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--certs-dir", certs,
		data)
	s.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=1",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	setDeathSignal(s.cmd)

	// Start and wait on one locked thread: on Linux the server gets a
	// death signal when the thread that started it ends.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			close(s.exited)
			return
		}
		started <- nil
		s.cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start minio %s: %w", bin, err)
	}
	if err := s.waitReady(); err != nil {
		s.kill()
		return nil, fmt.Errorf("minio %s did not start: %w\nserver output:\n%s", bin, err, s.out.String())
	}
	s.client, err = minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: Region,
	})
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the health check until it answers or the server exits.
func (s *Server) waitReady() error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(s.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server exited: %v", s.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s/minio/health/live in %v (last: %v)", s.Endpoint, startTimeout, err)
		}
	}
}

// freePorts returns n ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Stop stops the server and removes its files if they are its own. It is
// safe to call more than once.
func (s *Server) Stop() {
	s.stop.Do(func() {
		if s.cmd.Process != nil {
			s.cmd.Process.Signal(os.Interrupt)
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				s.kill()
			}
		}
		if s.rmDir {
			os.RemoveAll(s.dir)
		}
	})
}

func (s *Server) kill() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Output returns what the server has printed so far.
func (s *Server) Output() string { return s.out.String() }

var bucketSeq atomic.Int64

// Bucket creates a new, empty bucket named after name (made unique and
// valid) and returns a store URL for it, with the server's endpoint,
// region and credentials as query parameters:
//
//	s3://name-1?endpoint=http://127.0.0.1:PORT&region=us-east-1&access_key=...&secret_key=...
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	bucket := bucketName(name, bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("make bucket %s: %v\nserver output:\n%s", bucket, err, s.out.String())
	}
	return s.URL(bucket, "")
}

// URL returns the store URL of a prefix in a bucket of this server (which
// need not exist), with credentials.
func (s *Server) URL(bucket, prefix string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", Region)
	q.Set("access_key", s.AccessKey)
	q.Set("secret_key", s.SecretKey)
	u := url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: q.Encode()}
	return u.String()
}

// bucketName makes a valid, unique bucket name from a test name.
func bucketName(name string, seq int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	suffix := fmt.Sprintf("-%d", seq)
	base := strings.Trim(b.String(), "-")
	if len(base) > 63-len(suffix)-2 {
		base = strings.Trim(base[:63-len(suffix)-2], "-")
	}
	if base == "" {
		base = "bucket"
	}
	return "t-" + base + suffix
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
