package doltremote_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/doltremote"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	_ "github.com/chunkd/chunkd/store/folder"
	"github.com/chunkd/chunkd/tablefile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// countingStore counts the table-file bytes and reads taken from a store
// (the manifest objects are not counted).
type countingStore struct {
	store.Store
	mu    sync.Mutex
	bytes int64
	reads int
}

func isTableKey(key string) bool {
	return !strings.HasPrefix(filepath.Base(key), manifest.ManifestName)
}

func (c *countingStore) add(key string, n int) {
	if isTableKey(key) {
		c.mu.Lock()
		c.bytes += int64(n)
		c.reads++
		c.mu.Unlock()
	}
}

func (c *countingStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	n, err := c.Store.ReadAt(ctx, key, p, off)
	c.add(key, n)
	return n, err
}

func (c *countingStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	rc, info, err := c.Store.Open(ctx, key)
	if err != nil {
		return rc, info, err
	}
	return &countingReader{rc, c, key}, info, nil
}

func (c *countingStore) counts() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.reads
}

type countingReader struct {
	io.ReadCloser
	c   *countingStore
	key string
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.c.mu.Lock()
	if isTableKey(r.key) {
		r.c.bytes += int64(n)
	}
	r.c.mu.Unlock()
	return n, err
}

// remote is a running Dolt remote over a folder store.
type remote struct {
	t        *testing.T
	dir      string // the store's folder
	cacheDir string // the service's cache directory
	st       *countingStore
	cache    *cache.Cache
	svc      *doltremote.Service
	rpc      remotesapi.ChunkStoreServiceClient
	base     string // http://127.0.0.1:PORT
}

// copyDir copies the fixture folder src into the store folder as db.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newRemote copies fixture folders (testdata/dolt/<fixture>) into a store
// as databases (db name -> fixture) and serves them.
func newRemote(t *testing.T, dbs map[string]string, cfg cache.Config) *remote {
	t.Helper()
	dir := t.TempDir()
	for db, fixture := range dbs {
		copyDir(t, doltfixtures.Path(fixture), filepath.Join(dir, filepath.FromSlash(db)))
	}
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &remote{t: t, dir: dir, st: &countingStore{Store: s}}
	cfg.Store = r.st
	cfg.CacheDir = t.TempDir()
	r.cacheDir = cfg.CacheDir
	cfg.NoFsync = true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if r.cache, err = cache.New(cfg); err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.base = "http://" + hl.Addr().String()
	if r.svc, err = doltremote.New(doltremote.Config{Cache: r.cache, HTTPAddr: hl.Addr().String(), Logger: cfg.Logger}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, rt := range r.svc.Routes() {
		mux.Handle(rt.Pattern, rt.Handler)
	}
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(doltremote.ServerOptions()...)
	d := r.svc.GRPC()
	gs.RegisterService(d.Desc, d.Impl)
	go gs.Serve(gl)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.rpc = remotesapi.NewChunkStoreServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		hs.Close()
		r.cache.Close()
		s.Close()
	})
	return r
}

func (r *remote) get(url string, header ...string) (int, http.Header, []byte) {
	r.t.Helper()
	return r.do(http.MethodGet, url, header...)
}

func (r *remote) do(method, url string, header ...string) (int, http.Header, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, body
}

// fixtureManifest parses a fixture's manifest.
func fixtureManifest(t *testing.T, fixture string) *manifest.Manifest {
	t.Helper()
	b, err := os.ReadFile(doltfixtures.Path(fixture + "/manifest"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fixtureFile returns the path of a fixture's table file name (with .darc
// if it is an archive) and its bytes.
func fixtureFile(t *testing.T, fixture, name string) (string, []byte) {
	t.Helper()
	for _, p := range []string{name, name + manifest.ArchiveSuffix} {
		b, err := os.ReadFile(doltfixtures.Path(fixture + "/" + p))
		if err == nil {
			return p, b
		}
	}
	t.Fatalf("fixture %s has no table file %s", fixture, name)
	return "", nil
}

var fixtures = []string{"remote-classic", "remote-archive"}

func TestMetadataRootAndTableFiles(t *testing.T) {
	r := newRemote(t, map[string]string{"org/classic": "remote-classic", "org/archive": "remote-archive"}, cache.Config{})
	ctx := context.Background()
	for _, fx := range fixtures {
		db := "org/" + strings.TrimPrefix(fx, "remote-")
		t.Run(fx, func(t *testing.T) {
			m := fixtureManifest(t, fx)
			var size int64
			for _, spec := range m.Specs {
				_, b := fixtureFile(t, fx, spec.Name)
				size += int64(len(b))
			}
			// Dolt sends repo_path and, for ORG/REPO, repo_id; older
			// clients only repo_id.
			byPath := &remotesapi.GetRepoMetadataRequest{RepoPath: db, RepoId: &remotesapi.RepoId{Org: "org", RepoName: strings.TrimPrefix(db, "org/")}}
			byID := &remotesapi.GetRepoMetadataRequest{RepoId: byPath.RepoId}
			for _, req := range []*remotesapi.GetRepoMetadataRequest{byPath, byID} {
				md, err := r.rpc.GetRepoMetadata(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if md.NbfVersion != "__DOLT__" || md.NbsVersion != "5" || md.StorageSize != uint64(size) {
					t.Errorf("metadata: nbf %q nbs %q size %d, want __DOLT__, 5, %d", md.NbfVersion, md.NbsVersion, md.StorageSize, size)
				}
				if len(md.Features) != 1 || md.Features[0] != remotesapi.Feature_FEATURE_STREAM_CHUNK_LOCATIONS {
					t.Errorf("features %v, want [FEATURE_STREAM_CHUNK_LOCATIONS]", md.Features)
				}
			}
			root, err := r.rpc.Root(ctx, &remotesapi.RootRequest{RepoPath: db})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(root.RootHash, m.Root[:]) {
				t.Errorf("root %x, want %s", root.RootHash, m.Root)
			}
			list, err := r.rpc.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: db})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(list.RootHash, m.Root[:]) {
				t.Errorf("listed root %x, want %s", list.RootHash, m.Root)
			}
			if len(list.TableFileInfo) != len(m.Specs) || len(list.AppendixTableFileInfo) != 0 {
				t.Fatalf("%d table files and %d appendix files, want %d and 0", len(list.TableFileInfo), len(list.AppendixTableFileInfo), len(m.Specs))
			}
			byName := map[string]*remotesapi.TableFileInfo{}
			for _, f := range list.TableFileInfo {
				byName[f.FileId] = f
			}
			for _, spec := range m.Specs {
				f := byName[spec.Name]
				if f == nil {
					t.Fatalf("table file %s not listed", spec.Name)
				}
				file, b := fixtureFile(t, fx, spec.Name)
				tf := testdb.OpenTable(t, b)
				if want := r.base + "/dolt/v1/" + db + "/" + file; f.Url != want {
					t.Errorf("url %s, want %s", f.Url, want)
				}
				if f.NumChunks != spec.Chunks || f.SplitOffset != uint64(tf.DataEnd()) {
					t.Errorf("%s: %d chunks, split offset %d; want %d, %d", spec.Name, f.NumChunks, f.SplitOffset, spec.Chunks, tf.DataEnd())
				}
				if f.RefreshRequest.GetFileId() != spec.Name || f.RefreshRequest.RepoPath != db || !f.RefreshAfter.AsTime().After(time.Now()) {
					t.Errorf("%s: refresh request %v after %v", spec.Name, f.RefreshRequest, f.RefreshAfter.AsTime())
				}
				code, _, body := r.get(f.Url)
				if code != http.StatusOK || !bytes.Equal(body, b) {
					t.Errorf("GET %s: %d, %d bytes; want 200 and the file's %d bytes", f.Url, code, len(body), len(b))
				}
				refreshed, err := r.rpc.RefreshTableFileUrl(ctx, f.RefreshRequest)
				if err != nil {
					t.Fatal(err)
				}
				if refreshed.Url != f.Url || !refreshed.RefreshAfter.AsTime().After(time.Now()) {
					t.Errorf("refreshed url %s after %v, want %s in the future", refreshed.Url, refreshed.RefreshAfter.AsTime(), f.Url)
				}
			}
		})
	}
	_, err := r.rpc.RefreshTableFileUrl(ctx, &remotesapi.RefreshTableFileUrlRequest{RepoPath: "org/classic", FileId: "00000000000000000000000000000000"})
	wantCode(t, err, "NotFound", "has no table file")
}

// wantCode checks a call failed with a gRPC code whose message contains
// every one of want.
func wantCode(t *testing.T, err error, code string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	msg := err.Error()
	if !strings.Contains(msg, "code = "+code+" ") {
		t.Errorf("error %q, want code %s", msg, code)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

func TestRepositoryNames(t *testing.T) {
	r := newRemote(t, map[string]string{"org/both": "remote-classic", "both": "remote-archive", "solo": "remote-archive"}, cache.Config{})
	ctx := context.Background()
	classic, archive := fixtureManifest(t, "remote-classic"), fixtureManifest(t, "remote-archive")
	fileOf := func(path string) string {
		t.Helper()
		list, err := r.rpc.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: path})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return list.TableFileInfo[0].Url
	}
	// ORG/REPO names the folder ORG/REPO when it exists...
	if u := fileOf("org/both"); !strings.Contains(u, "/dolt/v1/org/both/") || !strings.Contains(u, classic.Specs[0].Name) {
		t.Errorf("org/both resolved to %s, want the database org/both", u)
	}
	// ...and else the database REPO; one segment names that database.
	for _, p := range []string{"other/solo", "solo", "/solo/"} {
		if u := fileOf(p); !strings.Contains(u, "/dolt/v1/solo/") || !strings.Contains(u, archive.Specs[0].Name) {
			t.Errorf("%s resolved to %s, want the database solo", p, u)
		}
	}
	_, err := r.rpc.Root(ctx, &remotesapi.RootRequest{RepoPath: "org/missing"})
	wantCode(t, err, "NotFound", `"org/missing"`, `"missing"`)
	_, err = r.rpc.Root(ctx, &remotesapi.RootRequest{})
	wantCode(t, err, "InvalidArgument", "neither repo_path nor repo_id")
	_, err = r.rpc.Root(ctx, &remotesapi.RootRequest{RepoPath: "org/bad name"})
	wantCode(t, err, "InvalidArgument", "not allowed")
}

func TestDownloads(t *testing.T) {
	r := newRemote(t, map[string]string{"db": "remote-classic"}, cache.Config{})
	m := fixtureManifest(t, "remote-classic")
	name := m.Specs[0].Name
	_, file := fixtureFile(t, "remote-classic", name)
	size := len(file)
	url := r.base + "/dolt/v1/db/" + name
	for _, tc := range []struct {
		rng     string
		code    int
		lo, hi  int // the bytes expected, file[lo:hi]
		crange  string
		comment string
	}{
		{"", 200, 0, size, "", "whole file"},
		{"bytes=10-99", 206, 10, 100, fmt.Sprintf("bytes 10-99/%d", size), "a range"},
		{"bytes=0-0", 206, 0, 1, fmt.Sprintf("bytes 0-0/%d", size), "one byte"},
		{fmt.Sprintf("bytes=%d-", size-5), 206, size - 5, size, fmt.Sprintf("bytes %d-%d/%d", size-5, size-1, size), "open-ended"},
		{"bytes=-7", 206, size - 7, size, fmt.Sprintf("bytes %d-%d/%d", size-7, size-1, size), "suffix"},
		{fmt.Sprintf("bytes=%d-%d", size-3, size+100), 206, size - 3, size, fmt.Sprintf("bytes %d-%d/%d", size-3, size-1, size), "past the end: clipped"},
		{"bytes=0-1,5-6", 200, 0, size, "", "several ranges: ignored"},
		{"bytes=9-3", 200, 0, size, "", "malformed: ignored"},
		{"items=0-3", 200, 0, size, "", "another unit: ignored"},
		{fmt.Sprintf("bytes=%d-", size), 416, 0, 0, fmt.Sprintf("bytes */%d", size), "unsatisfiable"},
		{"bytes=-0", 416, 0, 0, fmt.Sprintf("bytes */%d", size), "empty suffix"},
	} {
		var hdr []string
		if tc.rng != "" {
			hdr = []string{"Range", tc.rng}
		}
		code, h, body := r.get(url, hdr...)
		if code != tc.code || h.Get("Content-Range") != tc.crange {
			t.Errorf("%s (%q): %d, Content-Range %q; want %d, %q", tc.comment, tc.rng, code, h.Get("Content-Range"), tc.code, tc.crange)
			continue
		}
		if code == 416 {
			continue
		}
		if !bytes.Equal(body, file[tc.lo:tc.hi]) || h.Get("Accept-Ranges") != "bytes" {
			t.Errorf("%s (%q): %d bytes (Accept-Ranges %q), want bytes %d to %d", tc.comment, tc.rng, len(body), h.Get("Accept-Ranges"), tc.lo, tc.hi)
		}
	}
	code, h, body := r.do(http.MethodHead, url, "Range", "bytes=4-9")
	if code != 206 || len(body) != 0 || h.Get("Content-Length") != "6" {
		t.Errorf("HEAD: %d, %d body bytes, Content-Length %q; want 206, none, 6", code, len(body), h.Get("Content-Length"))
	}
	for _, tc := range []struct {
		method, url string
		code        int
		want        string
	}{
		{http.MethodPut, url, 405, "read-only"},
		{http.MethodPost, url, 405, "read-only"},
		{http.MethodGet, r.base + "/dolt/v1/db/nonsense", 400, "nonsense"},
		{http.MethodGet, r.base + "/dolt/v1/db/" + strings.Repeat("0", 32), 404, "no table file"},
		{http.MethodGet, r.base + "/dolt/v1/nodb/" + name, 404, "nodb"},
		{http.MethodGet, r.base + "/dolt/v1/" + name, 404, "want /dolt/v1/{db}/{table file}"},
		{http.MethodGet, r.base + "/dolt/v1/bad..name/" + name, 400, "bad..name"},
	} {
		code, _, body := r.do(tc.method, tc.url)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s: %d %s; want %d saying %q", tc.method, tc.url, code, body, tc.code, tc.want)
		}
	}
}

// TestClone makes dolt clone's requests twice: the first reads each table
// file from the store once (the service follows its own download), the
// second reads nothing from it.
func TestClone(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			r := newRemote(t, map[string]string{"org/db": fx}, cache.Config{})
			m := fixtureManifest(t, fx)
			ctx := context.Background()
			var size int64
			for _, spec := range m.Specs {
				_, b := fixtureFile(t, fx, spec.Name)
				size += int64(len(b))
			}
			c := &doltremote.Client{RPC: r.rpc, Repo: "org/db"}
			for i, want := range []string{"cold", "warm"} {
				before, _ := r.st.counts()
				dir := t.TempDir()
				res, err := c.Clone(ctx, dir)
				if err != nil {
					t.Fatalf("%s clone: %v", want, err)
				}
				if !bytes.Equal(res.Root, m.Root[:]) || res.Bytes != size || len(res.Files) != len(m.Specs) {
					t.Errorf("%s clone: root %x, %d bytes in %d files; want %s, %d in %d", want, res.Root, res.Bytes, len(res.Files), m.Root, size, len(m.Specs))
				}
				for _, f := range res.Files {
					got, err := os.ReadFile(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					_, b := fixtureFile(t, fx, strings.TrimSuffix(f, manifest.ArchiveSuffix))
					if !bytes.Equal(got, b) {
						t.Errorf("%s clone: %s differs from the store's", want, f)
					}
				}
				after, _ := r.st.counts()
				read := after - before
				switch i {
				case 0:
					// Each file once, plus what opening its index read.
					if read < size || read > size+int64(len(m.Specs))*(64<<10) {
						t.Errorf("cold clone read %d bytes of table files from the store, want %d and the index reads (store reads hedged so far: %+v)", read, size, r.cache.Hedges())
					}
					waitCached(t, r, "org/db")
				case 1:
					if read != 0 {
						t.Errorf("warm clone read %d bytes of table files from the store, want 0", read)
					}
				}
			}
		})
	}
}

// waitCached waits until the named files of db (all, if none are named)
// are on the service's disk.
func waitCached(t *testing.T, r *remote, db string, names ...string) {
	t.Helper()
	var named func(api.TableInfo) bool
	if len(names) > 0 {
		named = func(ti api.TableInfo) bool { return slices.Contains(names, ti.Name) }
	}
	if err := r.cache.WaitCached(context.Background(), db, time.Minute, named); err != nil {
		t.Fatal(err)
	}
}

// httpReaderAt reads a URL with Range requests.
type httpReaderAt struct {
	t   *testing.T
	url string
}

func (h httpReaderAt) ReadAt(p []byte, off int64) (int, error) {
	req, err := http.NewRequest(http.MethodGet, h.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("GET %s %s: %s", h.url, req.Header.Get("Range"), resp.Status)
	}
	return io.ReadFull(resp.Body, p)
}

// TestRangesReadLikeAFile opens every table file through Range requests
// and verifies every chunk in it, cold (read through from the store and
// checked on the way) and warm (from the cached copy).
func TestRangesReadLikeAFile(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			r := newRemote(t, map[string]string{"db": fx}, cache.Config{})
			for _, spec := range fixtureManifest(t, fx).Specs {
				file, b := fixtureFile(t, fx, spec.Name)
				for _, pass := range []string{"cold", "warm"} {
					tf, err := tablefile.Open(httpReaderAt{t, r.base + "/dolt/v1/db/" + file}, int64(len(b)), nil)
					if err != nil {
						t.Fatalf("%s %s: %v", pass, file, err)
					}
					var problems []string
					n, err := tf.Verify("", func(p tablefile.Problem) { problems = append(problems, p.String()) })
					if err != nil || len(problems) > 0 || n != int(spec.Chunks) {
						t.Errorf("%s %s: verified %d of %d chunks: %v %v", pass, file, n, spec.Chunks, err, problems)
					}
					waitCached(t, r, "db", spec.Name)
				}
			}
		})
	}
}

// TestListDownloadsAll: a client that lists a database's table files
// (dolt clone) reads them all next, a few at a time; the service starts
// downloading every one of them at the listing, so that the files the
// client asks for last are on disk or on their way by then.
func TestListDownloadsAll(t *testing.T) {
	r := newRemote(t, map[string]string{"org/classic": "remote-classic"}, cache.Config{})
	ctx := context.Background()
	m := fixtureManifest(t, "remote-classic")
	if len(m.Specs) < 2 {
		t.Fatalf("the fixture has %d table files: want several", len(m.Specs))
	}
	if _, err := r.rpc.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: "org/classic"}); err != nil {
		t.Fatal(err)
	}
	// No file was asked for: only the listing can have started them.
	if err := r.cache.WaitCached(ctx, "org/classic", 30*time.Second, nil); err != nil {
		t.Fatalf("after ListTableFiles alone: %v", err)
	}
	info, err := r.cache.DBInfo(ctx, "org/classic")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tables) != len(m.Specs) {
		t.Fatalf("%d table files on disk, want the manifest's %d", len(info.Tables), len(m.Specs))
	}
}
