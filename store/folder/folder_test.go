package folder_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
	"github.com/chunkd/chunkd/store/storetest"
)

// newFolder opens a folder store on dir, closed when the test ends, and
// returns it with dir.
func newFolder(t testing.TB, dir string) (*folder.Store, string) {
	t.Helper()
	s, err := folder.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := folder.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// The contract holds through store.Open and the wrappers too.
func TestContractViaOpenWithLatency(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(context.Background(), "file://"+filepath.ToSlash(t.TempDir())+"?latency=100us&bandwidth=10GB")
		if err != nil {
			t.Fatal(err)
		}
		return store.NewCounting(s)
	})
}

// The contract holds through the hedged store, whose reads (ReadAt,
// ReadTail, streams) are its own.
func TestContractHedged(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := folder.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return store.Hedge(s, store.HedgeOptions{})
	})
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir, "file://localhost" + dir, dir + "/new/sub"} {
		s, err := store.Open(ctx, u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if !strings.HasPrefix(s.String(), "file:///") {
			t.Errorf("Open(%q).String() = %q", u, s.String())
		}
		s.Close()
	}
	for _, u := range []string{"file://otherhost/x", "file://" + dir + "?foo=bar"} {
		if s, err := store.Open(ctx, u); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", u)
		}
	}
	// A relative path is made absolute.
	t.Chdir(dir)
	s, err := store.Open(ctx, "rel/dir")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.(*folder.Store).Root(), filepath.Join(dir, "rel", "dir"); got != want {
		t.Errorf("Root() = %q, want %q", got, want)
	}
	// A file is no folder.
	f := filepath.Join(dir, "plainfile")
	os.WriteFile(f, nil, 0o644)
	if _, err := folder.New(f); err == nil {
		t.Errorf("New(a file) succeeded")
	}
}

func TestReservedNames(t *testing.T) {
	ctx := context.Background()
	s, dir := newFolder(t, t.TempDir())
	if err := s.Put(ctx, "a/obj", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIf(ctx, "b", []byte("x"), ""); err != nil { // makes the lock file
		t.Fatal(err)
	}
	// Leftovers of a crashed writer.
	os.WriteFile(filepath.Join(dir, "a", ".chunkd-tmp-123"), []byte("partial"), 0o644)
	os.MkdirAll(filepath.Join(dir, ".chunkd-tmp-dir"), 0o755)
	os.WriteFile(filepath.Join(dir, ".chunkd-tmp-dir", "x"), []byte("partial"), 0o644)
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Key != "a/obj" || infos[1].Key != "b" {
		t.Errorf("List = %+v, want a/obj and b only", infos)
	}
	for _, key := range []string{".chunkd-lock", "a/.chunkd-tmp-123", ".chunkd-tmp-dir/x"} {
		if _, err := s.Get(ctx, key); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Get(%q): %v, want ErrBadKey", key, err)
		}
		if err := s.Put(ctx, key, nil); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Put(%q): %v, want ErrBadKey", key, err)
		}
	}
	// No temporary files are left behind by writes.
	entries, _ := os.ReadDir(filepath.Join(dir, "a"))
	for _, e := range entries {
		if e.Name() != "obj" && e.Name() != ".chunkd-tmp-123" {
			t.Errorf("stray file %s", e.Name())
		}
	}
}

func TestVersionOfForeignFiles(t *testing.T) {
	ctx := context.Background()
	s, dir := newFolder(t, t.TempDir())
	// A file put there by something else has its content hash as version.
	p := filepath.Join(dir, "foreign")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(ctx, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != folder.Version([]byte("abc")) {
		t.Errorf("version %s, want the content hash %s", info.Version, folder.Version([]byte("abc")))
	}
	// Same content, same version, whoever wrote it.
	if err := s.Put(ctx, "mine", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if mine, _ := s.Head(ctx, "mine"); mine.Version != info.Version {
		t.Errorf("Put gives version %s for the same bytes, Head of a foreign file %s", mine.Version, info.Version)
	}
	// Rewriting in place (not through the store) is noticed too.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("xyz"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mine, _ := s.Head(ctx, "mine"); mine.Version != folder.Version([]byte("xyz")) {
		t.Errorf("after an in-place rewrite, version %s, want %s", mine.Version, folder.Version([]byte("xyz")))
	}
}

func TestPutUnderObject(t *testing.T) {
	ctx := context.Background()
	s, _ := newFolder(t, t.TempDir())
	if err := s.Put(ctx, "a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	err := s.Put(ctx, "a/b", []byte("y"))
	if err == nil {
		t.Fatal("Put(a/b) with an object a succeeded; a folder cannot hold both")
	}
	t.Logf("Put(a/b) over object a: %v", err)
	if err := s.Put(ctx, "c/d", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if err = s.Put(ctx, "c", []byte("x")); err == nil {
		t.Fatal("Put(c) with an object c/d succeeded")
	}
	t.Logf("Put(c) over objects under c/: %v", err)
}

func TestAccessDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: permissions are not enforced")
	}
	ctx := context.Background()
	s, dir := newFolder(t, t.TempDir())
	if err := s.Put(ctx, "obj", []byte("x")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "obj"), 0)
	defer os.Chmod(filepath.Join(dir, "obj"), 0o644)
	if _, err := s.Get(ctx, "obj"); !errors.Is(err, store.ErrAccessDenied) {
		t.Errorf("Get of an unreadable file: %v, want ErrAccessDenied", err)
	}
}

// helperEnv makes the test binary act as a PutIf writer in another process.
const helperEnv = "CHUNKD_FOLDER_TEST_WRITER"

// TestMultiProcessPutIf has several processes increment a counter object
// with PutIf at once; none of the increments may be lost.
func TestMultiProcessPutIf(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in helper process")
	}
	const procs, each = 3, 25
	s, dir := newFolder(t, t.TempDir())
	if _, err := s.PutIf(context.Background(), "counter", []byte("0"), ""); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for i := 0; i < procs; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir+"|"+strconv.Itoa(each))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("writer output:\n%s", out)
			}
		})
		cmds = append(cmds, cmd)
	}
	// This process competes too.
	if err := increment(s, each); err != nil {
		t.Error(err)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer process: %v", err)
		}
	}
	b, err := s.Get(context.Background(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), strconv.Itoa((procs+1)*each); got != want {
		t.Errorf("counter = %s, want %s: increments were lost", got, want)
	}
}

func TestHelperWriter(t *testing.T) {
	env := os.Getenv(helperEnv)
	if env == "" {
		t.Skip("only run as a helper process")
	}
	dir, n, _ := strings.Cut(env, "|")
	each, _ := strconv.Atoi(n)
	// A separate Store, as another process would have.
	s, _ := newFolder(t, dir)
	if err := increment(s, each); err != nil {
		t.Fatal(err)
	}
}

// increment adds one to the counter object n times, each with a
// read-modify-PutIf loop.
func increment(s store.Store, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		for {
			rc, info, err := s.Open(ctx, "counter") // contents and version together
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			c, err := strconv.Atoi(string(b))
			if err != nil {
				return fmt.Errorf("counter holds %q", b)
			}
			_, err = s.PutIf(ctx, "counter", []byte(strconv.Itoa(c+1)), info.Version)
			if err == nil {
				break
			}
			if !errors.Is(err, store.ErrPrecondition) {
				return err
			}
		}
	}
	return nil
}

// TestMissingFolder: opening a folder that does not exist creates nothing;
// reads say the folder is missing, and the first write makes it. A plain
// path takes the latency parameters and refuses others, rather than making
// a folder whose name holds them.
func TestMissingFolder(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "typo")
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if store.Exists(s) {
		t.Fatal("Exists before any write")
	}
	_, err = s.Get(ctx, "db/manifest")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "store folder "+dir+" does not exist") {
		t.Fatalf("read from a missing folder: %v", err)
	}
	if infos, err := s.List(ctx, ""); err != nil || len(infos) != 0 {
		t.Fatalf("List of a missing folder: %v %v", infos, err)
	}
	if err := s.Delete(ctx, "db/manifest"); err != nil {
		t.Fatalf("Delete in a missing folder: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading made the folder: %v", err)
	}
	if err := s.Put(ctx, "db/manifest", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if !store.Exists(s) {
		t.Fatal("no folder after a write")
	}

	slow, err := store.Open(ctx, dir+"?latency=1ms")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if got, err := slow.Get(ctx, "db/manifest"); err != nil || string(got) != "x" {
		t.Fatalf("plain path with latency=: %q %v", got, err)
	}
	if _, err := store.Open(ctx, dir+"?lantency=1ms"); err == nil || !strings.Contains(err.Error(), "takes only latency= and bandwidth=") {
		t.Fatalf("plain path with an unknown parameter: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "never")
	if s, err := store.Open(ctx, missing+"?latency=1ms"); err != nil || store.Exists(s) {
		t.Fatalf("missing folder behind latency: %v, exists %v", err, err == nil && store.Exists(s))
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range entries {
		if strings.Contains(e.Name(), "?") {
			t.Fatalf("a folder named %q was made", e.Name())
		}
	}
}
