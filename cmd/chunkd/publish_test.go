package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/internal/bank"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// publisher is a running "chunkd publish".
type publisher struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
}

func startPublish(t *testing.T, args ...string) *publisher {
	t.Helper()
	p := &publisher{cmd: exec.Command(binary, append([]string{"publish"}, args...)...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

// TestPublishBank: chunkd publish follows a database that a writer
// process changes with bank transfers (WAL and rollback journal), killed
// with SIGKILL and started again on the way, with chunkd gc running
// beside it, while reader processes check each new version: every
// version keeps the sum of balances, nothing committed before the kill
// is lost, every version gc retains still reads, and SIGTERM stops it
// cleanly. The readers read through a chunkd serve: a version is readable
// through it the moment it is published.
func TestPublishBank(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(map[bool]string{true: "wal", false: "rollback"}[wal], func(t *testing.T) { publishBank(t, wal) })
	}
}

func publishBank(t *testing.T, wal bool) {
	ctx := context.Background()
	dir := t.TempDir()
	path, storeDir := filepath.Join(dir, "bank.sqlite"), filepath.Join(dir, "store")
	if err := bank.Create(path, 2000, wal); err != nil {
		t.Fatal(err)
	}
	w, err := bank.StartWriter(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		commits []bank.Commit
	)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for c := range w.Commits() {
			mu.Lock()
			commits = append(commits, c)
			mu.Unlock()
		}
	}()
	lastSeq := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		if len(commits) == 0 {
			return 0
		}
		return commits[len(commits)-1].Seq
	}
	args := []string{"--store", storeDir, "--db", "bank", "--watch", path, "--interval", "200ms"}
	p := startPublish(t, args...)
	// The readers read each version through a cache service alone, the
	// moment they see it in the store's manifest.
	svc := startService(t, storeDir, filepath.Join(dir, "cache"))
	var readers []*bank.Reader
	for range 2 {
		r, err := bank.StartReader(storeDir, "bank", svc.http)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	// chunkd gc beside it, again and again.
	gcDone := make(chan struct{})
	stopGC := make(chan struct{})
	var stopOnce sync.Once
	stopGCs := func() { stopOnce.Do(func() { close(stopGC) }); <-gcDone }
	t.Cleanup(stopGCs) // a failure below must not leave it logging after the test
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stopGC:
				return
			case <-time.After(700 * time.Millisecond):
			}
			if out, errOut, err := chunkd(t, "gc", "--store", storeDir, "--db", "bank", "--keep", "10", "--grace", "2s"); err != nil && !strings.Contains(errOut, "no database") {
				t.Errorf("gc beside publish: %v\n%s%s", err, out, errOut)
			}
		}
	}()

	time.Sleep(3 * time.Second)
	p.cmd.Process.Kill() // SIGKILL, mid-round or not
	p.cmd.Wait()
	killSeq := lastSeq()
	time.Sleep(500 * time.Millisecond)
	p = startPublish(t, args...)
	time.Sleep(3 * time.Second)
	if err := w.Stop(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	<-collected
	final := lastSeq()
	if killSeq == 0 || final <= killSeq {
		t.Fatalf("the writer committed %d transfers before the kill, %d in all", killSeq, final)
	}
	// The last version holds every transfer.
	deadline := time.Now().Add(30 * time.Second)
	var head sqlchunks.Version
	for {
		s, err := store.Open(ctx, storeDir)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.Open(ctx, client.Options{Store: s, DB: "bank", MemBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		root, _ := sqlchunks.Head(ctx, c)
		d, err := sqlchunks.OpenVersion(ctx, c, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := bank.Check(ctx, d.DB)
		d.Close()
		c.Close()
		s.Close()
		if err != nil || !st.Consistent() {
			t.Fatalf("head %s: %+v, %v", root, st, err)
		}
		if st.MaxSeq == final {
			head.Root = root
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the head holds transfers up to %d, the writer made %d", st.MaxSeq, final)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopGCs()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil || !strings.Contains(p.out.String(), "published ") {
		t.Fatalf("publish after SIGTERM: %v\n%s%s", err, p.out.String(), p.err.String())
	}
	var seen []bank.Seen
	for _, r := range readers {
		r.Stop()
		for s := range r.Seen() {
			seen = append(seen, s)
		}
	}
	heads, afterKill := 0, false
	for _, s := range seen {
		switch {
		case s.Err != "" && !s.At.IsZero():
			t.Errorf("a reader could not read version %s, the head when it looked: %s", s.Root, s.Err)
		case s.Err != "": // an older version, collected by gc before the reader got to it
		case !s.State.Consistent():
			t.Errorf("version %s: the balances sum to %d over %d accounts", s.Root, s.State.Sum, s.State.Accounts)
		default:
			if !s.At.IsZero() {
				heads++
			}
			afterKill = afterKill || s.State.MaxSeq >= killSeq
		}
	}
	if heads < 5 || !afterKill {
		t.Fatalf("the readers saw %d heads (%d versions); one holding the transfers before the kill: %v", heads, len(seen), afterKill)
	}
	// Every version gc retains reads, and keeps the sum.
	s, err := store.Open(ctx, storeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := client.Open(ctx, client.Options{Store: s, DB: "bank", MemBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gone, err := sqlchunks.Collected(ctx, s, "bank")
	if err != nil {
		t.Fatal(err)
	}
	hist, err := sqlchunks.History(ctx, c, gone, addr.Addr{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	retained := 0
	for _, v := range hist {
		if !v.Collected.IsZero() {
			continue
		}
		retained++
		d, err := sqlchunks.OpenVersion(ctx, c, v.Root, nil)
		if err != nil {
			t.Fatalf("retained version %s: %v", v.Root, err)
		}
		st, err := bank.Check(ctx, d.DB)
		d.Close()
		if err != nil || !st.Consistent() {
			t.Fatalf("retained version %s: %+v, %v", v.Root, st, err)
		}
	}
	t.Logf("%d transfers (%d before the kill), %d versions seen by the readers, %d in the history, %d retained, %d collected", final, killSeq, len(seen), len(hist), retained, len(gone))
	if retained < 10 {
		t.Errorf("%d versions retained, want the 10 gc keeps", retained)
	}
}
