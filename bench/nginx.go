package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/store"
)

// The nginx peer is what a user who only wants bytes near the database
// would put there instead of chunkd: nginx as a caching reverse proxy
// (proxy_cache, with the slice module so that byte ranges are cached in
// fixed slices) in front of the object store. The bench runs its own
// nginx: a config file, cache, temp dirs, logs and pid file in a scratch
// directory, started in the foreground with -p and -c, listening on
// loopback; it never reads or writes /etc/nginx or a system service.
//
// The origin is a small HTTP server in this process answering ranged GETs
// of the table file with one ranged read of the store each (with the
// store's emulated round trip, as S3 would answer them).

// nginxSlice is the slice module's slice size: nginx fetches and caches
// the object in pieces of this size, whatever range a client asks for
// (the size nginx's documentation uses).
const nginxSlice = "1m"

// nginxBinary finds nginx on PATH or at /usr/sbin/nginx and checks it has
// the slice module. It returns the binary and its version ("1.22.1").
func nginxBinary(ctx context.Context) (bin, version string, err error) {
	bin, err = exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			return "", "", errors.New("nginx is not installed (not on PATH, no /usr/sbin/nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	out, err := exec.CommandContext(ctx, bin, "-V").CombinedOutput() // nginx prints -V to stderr
	if err != nil {
		return "", "", fmt.Errorf("%s -V: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	m := regexp.MustCompile(`nginx version: nginx/(\S+)`).FindSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("%s -V printed no version: %s", bin, strings.TrimSpace(string(out)))
	}
	if !strings.Contains(string(out), "--with-http_slice_module") {
		return "", "", fmt.Errorf("%s (nginx %s) was built without the slice module (--with-http_slice_module)", bin, m[1])
	}
	return bin, string(m[1]), nil
}

// nginxPeer is a running nginx in front of an origin for one object.
type nginxPeer struct {
	bin, version string
	dir          string // scratch: config, cache, temp dirs, logs, pid
	workers      int
	url          string // http://127.0.0.1:PORT/KEY: the object through nginx
	origin       *http.Server
	cmd          *exec.Cmd
	done         chan struct{}
	err          error // from Wait, once done is closed
}

// startNginx starts nginx (bin, at version) with its files under dir,
// caching the object key (size bytes) of st, which an origin in this
// process serves.
func startNginx(ctx context.Context, bin, version, dir string, st store.Store, key string, size int64) (*nginxPeer, error) {
	p := &nginxPeer{bin: bin, version: version, dir: dir, workers: 2}
	for _, d := range []string{"cache", "tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.origin = &http.Server{Handler: rangeOrigin{st, key, size}, ReadHeaderTimeout: 10 * time.Second}
	go p.origin.Serve(ol)
	// nginx binds its own port: take a free one and hand it over, and
	// try another if someone took it in between.
	for try := 0; ; try++ {
		err = p.start(ctx, ol.Addr().String())
		if err == nil {
			p.url = strings.TrimSuffix(p.url, "/") + "/" + key
			return p, nil
		}
		if try == 2 || !strings.Contains(err.Error(), "in use") || ctx.Err() != nil {
			p.close()
			return nil, err
		}
	}
}

// start writes the config for a free port and runs nginx until it answers.
func (p *nginxPeer) start(ctx context.Context, origin string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	conf := filepath.Join(p.dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(p.config(addr, origin)), 0o600); err != nil {
		return err
	}
	errLog := filepath.Join(p.dir, "logs", "error.log")
	os.Remove(errLog)
	args := []string{"-p", p.dir + "/", "-c", conf}
	if versionAtLeast(p.version, 1, 19, 5) { // -e: the log nginx writes before it has read the config
		args = append(args, "-e", errLog)
	}
	p.cmd = exec.Command(p.bin, args...)
	p.cmd.Dir = p.dir
	ownProcessGroup(p.cmd)
	killWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	p.url = "http://" + addr
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	return poll(ctx, 20*time.Millisecond, 30*time.Second, func() (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("nginx exited at start (%v): %s", p.err, tailFile(errLog, 2000))
		default:
		}
		resp, err := hc.Get(p.url + "/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent, nil
	}, func() error {
		p.stop()
		return fmt.Errorf("nginx did not answer in 30 s: %s", tailFile(errLog, 2000))
	})
}

// config is the nginx.conf: a caching reverse proxy as a user would write
// it for serving byte ranges of immutable objects, tuned for speed (no
// access log, sendfile, open file cache, long keep-alive, keep-alive to
// the origin), every path it writes under p.dir.
func (p *nginxPeer) config(listen, origin string) string {
	d := func(name string) string { return filepath.Join(p.dir, name) }
	user := ""
	if os.Geteuid() == 0 { // workers would otherwise drop to an unprivileged user that cannot write p.dir
		user = "user root;\n"
	}
	return fmt.Sprintf(`# written by chunkd-bench chunks: nginx proxy_cache with the slice module
daemon off;
master_process on;
worker_processes %d;
%spid %s;
error_log %s warn;

events {
	worker_connections 1024;
}

http {
	access_log off;
	default_type application/octet-stream;
	sendfile on;
	tcp_nopush on;
	tcp_nodelay on;
	keepalive_timeout 300s;
	keepalive_requests 100000000;
	open_file_cache max=10000 inactive=1h;
	client_body_temp_path %s;
	proxy_temp_path %s;
	fastcgi_temp_path %s;
	uwsgi_temp_path %s;
	scgi_temp_path %s;
	proxy_cache_path %s levels=1:2 keys_zone=chunks:16m inactive=1d use_temp_path=off;

	upstream origin {
		server %s;
		keepalive 16;
	}

	server {
		listen %s;

		location = /ready {
			return 204;
		}

		location / {
			slice %s;
			proxy_cache chunks;
			proxy_cache_key $uri$slice_range;
			proxy_set_header Range $slice_range;
			proxy_cache_valid 200 206 1d;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_pass http://origin;
			add_header X-Cache-Status $upstream_cache_status;
		}
	}
}
`, p.workers, user, d("nginx.pid"), d("logs/error.log"),
		d("tmp/body"), d("tmp/proxy"), d("tmp/fastcgi"), d("tmp/uwsgi"), d("tmp/scgi"), d("cache"),
		origin, listen, nginxSlice)
}

// pids are nginx's processes: the master and its children (workers, cache
// manager and loader).
func (p *nginxPeer) pids() []string {
	master := p.cmd.Process.Pid
	pids := []string{strconv.Itoa(master)}
	for _, c := range childPIDs(master) {
		pids = append(pids, strconv.Itoa(c))
	}
	return pids
}

// stop ends nginx: a fast shutdown (SIGTERM to the master), and after 10
// s a kill of its process group.
func (p *nginxPeer) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		killProcessGroup(p.cmd)
		<-p.done
	}
}

func (p *nginxPeer) close() {
	p.stop()
	if p.origin != nil {
		p.origin.Close()
	}
}

// versionAtLeast reports whether version ("1.22.1") is at least
// major.minor.patch.
func versionAtLeast(version string, want ...int) bool {
	parts := strings.Split(version, ".")
	for i, w := range want {
		if i >= len(parts) {
			return false
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		if n != w {
			return n > w
		}
	}
	return true
}

// tailFile returns the last n bytes of a file, for error messages.
func tailFile(name string, n int64) string {
	f, err := os.Open(name)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// rangeOrigin serves one object of a store over HTTP as an object store
// does: a GET with "Range: bytes=FIRST-LAST" (the form nginx's slice
// module sends) is one ranged read of the store, answered 206; a GET
// without a Range streams the whole object.
type rangeOrigin struct {
	st   store.Store
	key  string
	size int64
}

func (o rangeOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/"+o.key {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Accept-Ranges", "bytes")
	spec := r.Header.Get("Range")
	if spec == "" {
		rc, _, err := o.st.Open(r.Context(), o.key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer rc.Close()
		h.Set("Content-Length", strconv.FormatInt(o.size, 10))
		io.Copy(w, rc)
		return
	}
	first, last, err := parseByteRange(spec, o.size)
	if err != nil {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", o.size))
		http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	buf := make([]byte, last-first+1)
	if _, err := o.st.ReadAt(r.Context(), o.key, buf, first); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, o.size))
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusPartialContent)
	w.Write(buf)
}

// parseByteRange parses one "bytes=FIRST-LAST" range of an object of size
// bytes; LAST past the end is cut to it, as HTTP says.
func parseByteRange(spec string, size int64) (first, last int64, err error) {
	r, ok := strings.CutPrefix(spec, "bytes=")
	a, b, ok2 := strings.Cut(r, "-")
	if !ok || !ok2 || strings.Contains(r, ",") {
		return 0, 0, fmt.Errorf("range %q: want one bytes=FIRST-LAST", spec)
	}
	if first, err = strconv.ParseInt(a, 10, 64); err != nil || first < 0 {
		return 0, 0, fmt.Errorf("range %q: bad first byte", spec)
	}
	if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
		return 0, 0, fmt.Errorf("range %q: bad last byte", spec)
	}
	if first >= size {
		return 0, 0, fmt.Errorf("range %q: starts past the object's %d bytes", spec, size)
	}
	return first, min(last, size-1), nil
}
