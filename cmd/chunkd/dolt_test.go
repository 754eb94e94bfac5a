package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/manifest"
)

// doltEnv runs a real dolt binary (CHUNKD_DOLT) with its own home.
type doltEnv struct {
	t    *testing.T
	bin  string
	home string
}

// newDoltEnv finds dolt through $CHUNKD_DOLT, or skips the test.
func newDoltEnv(t *testing.T) *doltEnv {
	t.Helper()
	bin := os.Getenv("CHUNKD_DOLT")
	if bin == "" {
		t.Skip("CHUNKD_DOLT is not set: this test needs a dolt binary (see README, As a Dolt remote)")
	}
	d := &doltEnv{t: t, bin: bin, home: t.TempDir()}
	for _, kv := range [][2]string{
		{"user.name", "chunkd test"}, {"user.email", "test@chunkd.invalid"},
		{"metrics.disabled", "true"}, {"versioncheck.disabled", "true"},
	} {
		d.run("", nil, "config", "--global", "--add", kv[0], kv[1])
	}
	return d
}

// exec runs dolt in dir and returns its stdout, stderr and error.
func (d *doltEnv) exec(dir string, env []string, args ...string) (string, string, error) {
	cmd := exec.Command(d.bin, args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = d.home
	}
	cmd.Env = append(os.Environ(), append([]string{"HOME=" + d.home, "DOLT_ROOT_PATH=" + d.home, "NO_COLOR=1",
		// No background process sending usage events (which would also
		// try the network).
		"DOLT_DISABLE_EVENT_FLUSH=true"}, env...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// run runs dolt and fails the test if it fails.
func (d *doltEnv) run(dir string, env []string, args ...string) string {
	d.t.Helper()
	out, errOut, err := d.exec(dir, env, args...)
	if err != nil {
		d.t.Fatalf("dolt %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, out, errOut)
	}
	return out
}

// snapshot is what a clone holds: every table's rows and the history.
func (d *doltEnv) snapshot(dir, branch string) string {
	d.t.Helper()
	var b strings.Builder
	tables := d.run(dir, nil, "sql", "-r", "csv", "-q", "show tables")
	for _, table := range strings.Fields(tables)[1:] {
		b.WriteString("== " + table + "\n")
		b.WriteString(d.run(dir, nil, "sql", "-r", "csv", "-q", "select * from `"+table+"` as of '"+branch+"'"))
	}
	b.WriteString("== log\n")
	b.WriteString(d.run(dir, nil, "log", branch))
	return b.String()
}

// TestDoltThroughService runs dolt clone, fetch and pull through the
// service, over the Dolt fixture remotes (classic and archive table files)
// and over databases dolt makes and pushes to a folder remote in the store
// (archives, dolt's default, and classic table files), and compares what
// they get with clones made straight from the store. A second clone reads
// no table-file bytes from the store, and a push through the service is
// refused.
func TestDoltThroughService(t *testing.T) {
	d := newDoltEnv(t)
	work := t.TempDir()
	store := filepath.Join(work, "store")
	for db, fixture := range map[string]string{"org/classic": "remote-classic", "archive": "remote-archive"} {
		if err := os.CopyFS(filepath.Join(store, filepath.FromSlash(db)), os.DirFS(doltfixtures.Path(fixture))); err != nil {
			t.Fatal(err)
		}
	}
	// Databases made by dolt, pushed to folder remotes in the store.
	classicFiles := []string{"DOLT_ARCHIVE_PULL_STREAMER=0"}
	made := map[string][]string{"org/made": nil, "org/made-classic": classicFiles}
	for db, env := range made {
		src := filepath.Join(work, "src-"+filepath.Base(db))
		os.MkdirAll(src, 0o755)
		d.run(src, nil, "init")
		d.run(src, nil, "sql", "-q", "create table t (id int primary key, name varchar(64), n int); create table u (k varchar(16) primary key, v text)")
		var ins strings.Builder
		ins.WriteString("insert into t values ")
		for i := 0; i < 3000; i++ {
			if i > 0 {
				ins.WriteString(",")
			}
			ins.WriteString("(" + strconv.Itoa(i) + ", 'row " + strconv.Itoa(i*7919%10007) + "', " + strconv.Itoa(i*i%977) + ")")
		}
		d.run(src, nil, "sql", "-q", ins.String()+"; insert into u values ('a', 'first'), ('b', 'second')")
		d.run(src, nil, "add", ".")
		d.run(src, nil, "commit", "-m", "first commit of "+db)
		d.run(src, nil, "sql", "-q", "update t set n = n + 1 where id % 3 = 0; delete from u where k = 'b'")
		d.run(src, nil, "commit", "-am", "second commit")
		d.run(src, env, "remote", "add", "origin", "file://"+filepath.Join(store, filepath.FromSlash(db)))
		d.run(src, env, "push", "origin", "main")
	}
	darcs, _ := filepath.Glob(filepath.Join(store, "org", "made", "*.darc"))
	classicDarcs, _ := filepath.Glob(filepath.Join(store, "org", "made-classic", "*.darc"))
	if len(darcs) == 0 || len(classicDarcs) != 0 {
		t.Fatalf("the pushes wrote %d archives to org/made (want some) and %d to org/made-classic (want none)", len(darcs), len(classicDarcs))
	}

	s := startService(t, store, filepath.Join(work, "cache"), "--manifest-ttl", "100ms")
	remote := "http://" + s.grpcAddr + "/"
	// Repository paths as a Dolt user writes them: ORG/REPO, and
	// OTHER/REPO for the database REPO.
	repos := []struct{ path, db string }{
		{"org/classic", "org/classic"},
		{"anyorg/archive", "archive"},
		{"org/made", "org/made"},
		{"org/made-classic", "org/made-classic"},
	}
	files := 0
	for _, r := range repos {
		b, err := os.ReadFile(filepath.Join(store, filepath.FromSlash(r.db), "manifest"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := manifest.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		files += len(m.Specs)
	}

	dirs := func(i int) (direct, via string) {
		return filepath.Join(work, "direct-"+strconv.Itoa(i)), filepath.Join(work, "via-"+strconv.Itoa(i))
	}
	for i, r := range repos {
		direct, via := dirs(i)
		d.run(work, nil, "clone", "file://"+filepath.Join(store, filepath.FromSlash(r.db)), direct)
		d.run(work, nil, "clone", remote+r.path, via)
		if got, want := d.snapshot(via, "main"), d.snapshot(direct, "main"); got != want {
			t.Fatalf("clone of %s through the service differs from one from the store:\n--- service\n%.2000s\n--- store\n%.2000s", r.path, got, want)
		}
	}

	// Once the first clones' downloads are in, clones read no table file
	// from the store.
	s.waitMetric(`chunkd_downloads_total{result="finished"}`, float64(files))
	before := s.metric("chunkd_store_bytes_total")
	for i, r := range repos {
		d.run(work, nil, "clone", remote+r.path, filepath.Join(work, "again-"+strconv.Itoa(i)))
	}
	if after := s.metric("chunkd_store_bytes_total"); after != before {
		t.Errorf("second clones read %v bytes of table files from the store, want 0", after-before)
	}

	// A push through the service is refused, saying why.
	_, via0 := dirs(0)
	d.run(via0, nil, "sql", "-q", "insert into sentences values (900001, 'en', 'not pushed')")
	d.run(via0, nil, "commit", "-am", "a commit the remote refuses")
	if _, errOut, err := d.exec(via0, nil, "push", "origin", "main"); err == nil || !strings.Contains(errOut, "read-only remote") {
		t.Errorf("push through the service: %v, %s; want a read-only refusal", err, errOut)
	}

	// A new commit pushed to the store: fetch and pull through the
	// service get it, as the store's own clone does.
	for i, r := range repos {
		direct, via := dirs(i)
		table, row := "t", "(100000, 'new', 1)"
		if !strings.HasPrefix(r.db, "org/made") {
			table, row = "sentences", "(900000, 'en', 'a new sentence')"
		}
		d.run(direct, nil, "sql", "-q", "insert into "+table+" values "+row)
		d.run(direct, nil, "commit", "-am", "third commit, pushed to the store")
		env := made[r.db]
		d.run(direct, env, "push", "origin", "main")
		time.Sleep(150 * time.Millisecond) // past --manifest-ttl
		if i == 0 {
			// The refused commit above is only local: start over from the
			// remote before pulling.
			d.run(via, nil, "reset", "--hard", "HEAD~1")
		}
		d.run(via, nil, "fetch")
		if got, want := d.snapshot(via, "origin/main"), d.snapshot(direct, "main"); got != want {
			t.Fatalf("fetch of %s through the service: origin/main differs from the store's main:\n--- service\n%.2000s\n--- store\n%.2000s", r.path, got, want)
		}
		d.run(via, nil, "pull")
		if got, want := d.snapshot(via, "main"), d.snapshot(direct, "main"); got != want {
			t.Fatalf("pull of %s through the service differs from the store:\n--- service\n%.2000s\n--- store\n%.2000s", r.path, got, want)
		}
		if !strings.Contains(d.run(via, nil, "log", "-n", "1"), "third commit, pushed to the store") {
			t.Errorf("%s: the pulled head is not the new commit", r.path)
		}
	}
	s.stop()
}
