// Package storetest is a contract test suite that every store.Store backend
// must pass. A backend's tests call Run with a function that opens a fresh,
// empty store.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkd/chunkd/store"
)

// Run runs the contract tests as subtests of t.
//
// The tests never use one key both as an object and as a "directory" of
// others ("a" and "a/b"): object stores allow it but a folder cannot. open must return a new,
// empty store for each call; it is called once per subtest, with that
// subtest's t, and should register any cleanup with it. The store is
// closed by Run.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"PutGet", testPutGet},
		{"ReadAt", testReadAt},
		{"OpenStream", testOpenStream},
		{"OpenRange", testOpenRange},
		{"ReadTail", testReadTail},
		{"Head", testHead},
		{"List", testList},
		{"ListTimes", testListTimes},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"BadKeys", testBadKeys},
		{"OddKeys", testOddKeys},
		{"PutIf", testPutIf},
		{"PutIfRace", testPutIfRace},
		{"AtomicPut", testAtomicPut},
		{"Cancelled", testCancelled},
		{"Large", testLarge},
		{"ReaderAt", testReaderAt},
		{"String", testString},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// ctxT returns a context that ends with the test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s store.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(ctxT(t), key, data); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s store.Store, key string) []byte {
	t.Helper()
	b, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return b
}

func mustHead(t *testing.T, s store.Store, key string) store.Info {
	t.Helper()
	info, err := s.Head(ctxT(t), key)
	if err != nil {
		t.Fatalf("Head(%q): %v", key, err)
	}
	return info
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %q", what, err, target)
	}
}

// pattern returns n bytes that differ at every offset mod 251.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ seed
	}
	return b
}

func testPutGet(t *testing.T, s store.Store) {
	mustPut(t, s, "a", []byte("hello"))
	if got := mustGet(t, s, "a"); string(got) != "hello" {
		t.Fatalf("Get = %q, want hello", got)
	}
	mustPut(t, s, "a", []byte("replaced, longer"))
	if got := mustGet(t, s, "a"); string(got) != "replaced, longer" {
		t.Fatalf("Get after overwrite = %q", got)
	}
	mustPut(t, s, "a", []byte("x"))
	if got := mustGet(t, s, "a"); string(got) != "x" {
		t.Fatalf("Get after shorter overwrite = %q", got)
	}
	mustPut(t, s, "empty", nil)
	if got := mustGet(t, s, "empty"); len(got) != 0 {
		t.Fatalf("Get(empty) = %q", got)
	}
	mustPut(t, s, "dir/sub/obj", []byte("deep"))
	if got := mustGet(t, s, "dir/sub/obj"); string(got) != "deep" {
		t.Fatalf("Get(dir/sub/obj) = %q", got)
	}
}

func testReadAt(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	data := pattern(1000, 7)
	mustPut(t, s, "obj", data)

	for _, c := range []struct{ off, n int }{{0, 1000}, {0, 1}, {10, 90}, {999, 1}, {500, 500}, {0, 0}, {1000, 0}} {
		p := make([]byte, c.n)
		n, err := s.ReadAt(ctx, "obj", p, int64(c.off))
		if err != nil || n != c.n || !bytes.Equal(p, data[c.off:c.off+c.n]) {
			t.Errorf("ReadAt(off %d, len %d) = %d, %v; want %d bytes of the object", c.off, c.n, n, err, c.n)
		}
	}
	// Past the end: the bytes that exist, and io.ErrUnexpectedEOF.
	p := make([]byte, 100)
	n, err := s.ReadAt(ctx, "obj", p, 950)
	wantErr(t, "ReadAt past end", err, io.ErrUnexpectedEOF)
	if n != 50 || !bytes.Equal(p[:n], data[950:]) {
		t.Errorf("ReadAt past end read %d bytes, want the last 50", n)
	}
	for _, off := range []int64{1000, 1001, 1 << 40} {
		n, err = s.ReadAt(ctx, "obj", make([]byte, 10), off)
		if n != 0 {
			t.Errorf("ReadAt(off %d) read %d bytes, want 0", off, n)
		}
		wantErr(t, fmt.Sprintf("ReadAt at offset %d of 1000", off), err, io.ErrUnexpectedEOF)
	}
	mustPut(t, s, "empty", nil)
	n, err = s.ReadAt(ctx, "empty", make([]byte, 1), 0)
	if n != 0 {
		t.Errorf("ReadAt(empty) read %d bytes", n)
	}
	wantErr(t, "ReadAt of an empty object", err, io.ErrUnexpectedEOF)
	if _, err := s.ReadAt(ctx, "empty", nil, 0); err != nil {
		t.Errorf("zero-length ReadAt of an empty object: %v", err)
	}
}

func testOpenStream(t *testing.T, s store.Store) {
	data := pattern(100_000, 3)
	mustPut(t, s, "obj", data)
	rc, info, err := s.Open(ctxT(t), "obj")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Errorf("closing stream: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("stream gave %d bytes, not the object's %d", len(got), len(data))
	}
	head := mustHead(t, s, "obj")
	if info.Size != int64(len(data)) || info.Version != head.Version || info.Key != "obj" {
		t.Errorf("Open info = %+v, want key obj, size %d, version %s", info, len(data), head.Version)
	}
	// Closing early is fine.
	rc, _, err = s.Open(ctxT(t), "obj")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := rc.Read(make([]byte, 10)); err != nil {
		t.Errorf("Read: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Errorf("closing a half-read stream: %v", err)
	}
}

// testOpenRange checks store.OpenRange: the backend's own, when it has
// one (store.RangeReader), else the fallback over ReadAt.
func testOpenRange(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	data := pattern(3*store.PieceSize+1000, 5)
	mustPut(t, s, "obj", data)
	for _, c := range []struct{ off, n int }{{0, len(data)}, {0, 1}, {10, 90}, {len(data) - 1, 1}, {store.PieceSize - 5, store.PieceSize + 10}, {0, 0}, {len(data), 0}} {
		rc, err := store.OpenRange(ctx, s, "obj", int64(c.off), int64(c.n))
		if err != nil {
			t.Errorf("OpenRange(off %d, len %d): %v", c.off, c.n, err)
			continue
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Errorf("OpenRange(off %d, len %d) gave %d bytes, %v; want %d bytes of the object", c.off, c.n, len(got), err, c.n)
		}
	}
	// Past the end: the bytes that exist, then io.ErrUnexpectedEOF.
	for _, c := range []struct{ off, n int }{{len(data) - 50, 100}, {len(data), 10}, {len(data) + 10, 10}} {
		rc, err := store.OpenRange(ctx, s, "obj", int64(c.off), int64(c.n))
		var got []byte
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		wantErr(t, fmt.Sprintf("OpenRange(off %d, len %d) past the end", c.off, c.n), err, io.ErrUnexpectedEOF)
		if c.off < len(data) && !bytes.Equal(got, data[c.off:]) {
			t.Errorf("OpenRange past the end gave %d bytes, want the last %d", len(got), len(data)-c.off)
		}
	}
	rc, err := store.OpenRange(ctx, s, "missing", 0, 10)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	wantErr(t, "OpenRange of a missing object", err, store.ErrNotFound)
	// Closing early is fine.
	rc, err = store.OpenRange(ctx, s, "obj", 0, int64(len(data)))
	if err != nil {
		t.Fatalf("OpenRange: %v", err)
	}
	if _, err := rc.Read(make([]byte, 10)); err != nil {
		t.Errorf("Read: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Errorf("closing a half-read range: %v", err)
	}
}

// testReadTail reads the ends of objects with store.ReadTail: the store's
// own (a TailReader) where it has one.
func testReadTail(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	data := pattern(200_000, 9)
	mustPut(t, s, "obj", data)
	mustPut(t, s, "empty", nil)
	for _, c := range []struct {
		key  string
		want []byte
		p    int
	}{
		{"obj", data[len(data)-1:], 1},
		{"obj", data[len(data)-65536:], 65536},
		{"obj", data, len(data)},
		{"obj", data, len(data) + 1000}, // longer than the object: all of it
		{"empty", nil, 100},
	} {
		p := make([]byte, c.p)
		n, size, err := store.ReadTail(ctx, s, c.key, p)
		if err != nil || size != int64(len(c.want)) && c.key == "empty" || c.key == "obj" && size != int64(len(data)) || !bytes.Equal(p[:n], c.want) {
			t.Errorf("ReadTail(%s, %d bytes): %d bytes, size %d, %v; want the last %d bytes", c.key, c.p, n, size, err, len(c.want))
		}
	}
	_, _, err := store.ReadTail(ctx, s, "missing", make([]byte, 10))
	wantErr(t, "ReadTail of a missing object", err, store.ErrNotFound)
}

func testHead(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Hour) // clocks of remote stores drift
	mustPut(t, s, "obj", []byte("12345"))
	info := mustHead(t, s, "obj")
	if info.Key != "obj" || info.Size != 5 || info.Version == "" {
		t.Errorf("Head = %+v, want key obj, size 5, a version", info)
	}
	if info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(time.Hour)) {
		t.Errorf("Head ModTime = %v, want about now", info.ModTime)
	}
	if again := mustHead(t, s, "obj"); again.Version != info.Version {
		t.Errorf("version changed without a write: %s then %s", info.Version, again.Version)
	}
	mustPut(t, s, "obj", []byte("54321"))
	if changed := mustHead(t, s, "obj"); changed.Version == info.Version {
		t.Errorf("version %s did not change when the object did", info.Version)
	}
	mustPut(t, s, "empty", nil)
	if e := mustHead(t, s, "empty"); e.Size != 0 || e.Version == "" {
		t.Errorf("Head(empty) = %+v", e)
	}
}

func testList(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	// No key is also a "directory" of others: a folder store cannot hold both.
	keys := []string{"b-1", "a/c/d", "ab", "a/b", "a.x", "a-b", "b/1", "zz/top/x/y/z", "a/c/e"}
	for i, k := range keys {
		mustPut(t, s, k, pattern(i+1, byte(i)))
	}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	check := func(prefix string, want []string) {
		t.Helper()
		infos, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		got := make([]string, len(infos))
		for i, info := range infos {
			got[i] = info.Key
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	check("", sorted)
	check("a", []string{"a-b", "a.x", "a/b", "a/c/d", "a/c/e", "ab"})
	check("a/", []string{"a/b", "a/c/d", "a/c/e"})
	check("a/c", []string{"a/c/d", "a/c/e"})
	check("a/c/", []string{"a/c/d", "a/c/e"})
	check("a/c/d", []string{"a/c/d"})
	check("b", []string{"b-1", "b/1"})
	check("zz/top/", []string{"zz/top/x/y/z"})
	check("nothing", nil)
	check("nothing/", nil)
	check("a/b/", nil)
	check("../", nil)

	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		head := mustHead(t, s, info.Key)
		if info.Size != head.Size || info.Version != head.Version {
			t.Errorf("List gave %+v for %s, Head gives %+v", info, info.Key, head)
		}
		// gc decides by these times: List's must be Head's (S3 gives
		// Head's to the second, List's to the millisecond).
		if d := info.ModTime.Sub(head.ModTime); d < -time.Second || d > time.Second {
			t.Errorf("List gave time %v for %s, Head gives %v", info.ModTime, info.Key, head.ModTime)
		}
	}
}

// testListTimes: List gives each object the time it was last written
// (gc keeps files written within its grace period by it), later for a
// later write.
func testListTimes(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "t/old", []byte("old"))
	time.Sleep(1100 * time.Millisecond) // clocks of stores with one-second times
	mustPut(t, s, "t/new", []byte("new"))
	infos, err := s.List(ctx, "t/")
	if err != nil || len(infos) != 2 {
		t.Fatalf("List = %v, %v", infos, err)
	}
	old, young := infos[1], infos[0] // sorted by key: "t/new" first
	if !young.ModTime.After(old.ModTime) {
		t.Errorf("List times: %s written at %v, %s written later at %v", old.Key, old.ModTime, young.Key, young.ModTime)
	}
	if d := time.Since(young.ModTime); d < -time.Hour || d > time.Hour {
		t.Errorf("List time of an object just written: %v (%v ago)", young.ModTime, d)
	}
	time.Sleep(1100 * time.Millisecond)
	mustPut(t, s, "t/old", []byte("rewritten"))
	again, err := s.List(ctx, "t/old")
	if err != nil || len(again) != 1 || !again[0].ModTime.After(young.ModTime) {
		t.Errorf("List after a rewrite: %v, %v; want a time after %v", again, err, young.ModTime)
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "x/y", []byte("1"))
	mustPut(t, s, "x/z", []byte("2"))
	if err := s.Delete(ctx, "x/y"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Get(ctx, "x/y")
	wantErr(t, "Get after Delete", err, store.ErrNotFound)
	if err := s.Delete(ctx, "x/y"); err != nil {
		t.Errorf("deleting a deleted object: %v", err)
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Errorf("deleting a missing object: %v", err)
	}
	if err := s.Delete(ctx, "x"); err != nil {
		t.Errorf("deleting a missing object named like a prefix: %v", err)
	}
	infos, err := s.List(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Key != "x/z" {
		t.Errorf("List after Delete = %v, %v; want just x/z", infos, err)
	}
	if err := s.Delete(ctx, "x/z"); err != nil {
		t.Fatal(err)
	}
	// The key that was a "directory" can now be an object.
	mustPut(t, s, "x", []byte("file now"))
	if got := mustGet(t, s, "x"); string(got) != "file now" {
		t.Errorf("Get(x) = %q", got)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "dir/obj", []byte("1"))
	for _, key := range []string{"missing", "dir", "dir/obj/below", "dir/missing"} {
		_, err := s.ReadAt(ctx, key, make([]byte, 1), 0)
		wantErr(t, "ReadAt "+key, err, store.ErrNotFound)
		_, err = s.ReadAt(ctx, key, nil, 0)
		wantErr(t, "zero-length ReadAt "+key, err, store.ErrNotFound)
		_, err = s.Get(ctx, key)
		wantErr(t, "Get "+key, err, store.ErrNotFound)
		rc, _, err := s.Open(ctx, key)
		if rc != nil {
			rc.Close()
		}
		wantErr(t, "Open "+key, err, store.ErrNotFound)
		_, err = s.Head(ctx, key)
		wantErr(t, "Head "+key, err, store.ErrNotFound)
		if err != nil && !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name the key %q", err, key)
		}
	}
}

func testBadKeys(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for _, key := range []string{"", "../x", "/abs", "a/../b", "a//b", "a/", "./a", "a/.", "..", `a\b`, "a\x00b"} {
		_, err := s.ReadAt(ctx, key, make([]byte, 1), 0)
		wantErr(t, fmt.Sprintf("ReadAt(%q)", key), err, store.ErrBadKey)
		_, err = s.Get(ctx, key)
		wantErr(t, fmt.Sprintf("Get(%q)", key), err, store.ErrBadKey)
		rc, _, err := s.Open(ctx, key)
		if rc != nil {
			rc.Close()
		}
		wantErr(t, fmt.Sprintf("Open(%q)", key), err, store.ErrBadKey)
		err = s.Put(ctx, key, []byte("x"))
		wantErr(t, fmt.Sprintf("Put(%q)", key), err, store.ErrBadKey)
		_, err = s.PutIf(ctx, key, []byte("x"), "")
		wantErr(t, fmt.Sprintf("PutIf(%q)", key), err, store.ErrBadKey)
		_, err = s.Head(ctx, key)
		wantErr(t, fmt.Sprintf("Head(%q)", key), err, store.ErrBadKey)
		err = s.Delete(ctx, key)
		wantErr(t, fmt.Sprintf("Delete(%q)", key), err, store.ErrBadKey)
	}
	if infos, err := s.List(ctx, ""); err != nil || len(infos) != 0 {
		t.Errorf("after bad puts, List = %v, %v; want nothing", infos, err)
	}
}

func testOddKeys(t *testing.T, s store.Store) {
	keys := []string{"with space", "ünïcödé/ключ", "plus+and&amp=eq?q#hash", "pct%20%2F", "dots.in.name..x", "tilde~", ".hidden"}
	for i, k := range keys {
		mustPut(t, s, k, []byte{byte(i)})
	}
	for i, k := range keys {
		if got := mustGet(t, s, k); !bytes.Equal(got, []byte{byte(i)}) {
			t.Errorf("Get(%q) = %v", k, got)
		}
		if info := mustHead(t, s, k); info.Key != k {
			t.Errorf("Head(%q).Key = %q", k, info.Key)
		}
	}
	infos, err := s.List(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string(nil), keys...)
	sort.Strings(want)
	var got []string
	for _, info := range infos {
		got = append(got, info.Key)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("List = %q, want %q", got, want)
	}
}

func testPutIf(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	// Create if absent.
	v1, err := s.PutIf(ctx, "m", []byte("one"), "")
	if err != nil || v1 == "" {
		t.Fatalf("PutIf create = %q, %v", v1, err)
	}
	if h := mustHead(t, s, "m"); h.Version != v1 {
		t.Errorf("PutIf returned version %s, Head says %s", v1, h.Version)
	}
	_, err = s.PutIf(ctx, "m", []byte("two"), "")
	wantErr(t, "PutIf create over an existing object", err, store.ErrPrecondition)
	// Replace if it matches.
	v2, err := s.PutIf(ctx, "m", []byte("two"), v1)
	if err != nil || v2 == "" || v2 == v1 {
		t.Fatalf("PutIf replace = %q, %v; want a new version", v2, err)
	}
	if got := mustGet(t, s, "m"); string(got) != "two" {
		t.Errorf("after PutIf, Get = %q", got)
	}
	// A stale version loses and changes nothing.
	_, err = s.PutIf(ctx, "m", []byte("three"), v1)
	wantErr(t, "PutIf with a stale version", err, store.ErrPrecondition)
	if got := mustGet(t, s, "m"); string(got) != "two" {
		t.Errorf("a failed PutIf changed the object to %q", got)
	}
	_, err = s.PutIf(ctx, "m", []byte("three"), "not-a-version")
	wantErr(t, "PutIf with a made-up version", err, store.ErrPrecondition)
	// A version of a missing object never matches.
	_, err = s.PutIf(ctx, "other", []byte("x"), v2)
	wantErr(t, "PutIf(version) of a missing object", err, store.ErrPrecondition)
	if _, err := s.Head(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a failed PutIf created the object (Head: %v)", err)
	}
	// Versions from Put work too.
	mustPut(t, s, "m", []byte("four"))
	h := mustHead(t, s, "m")
	v4, err := s.PutIf(ctx, "m", []byte("five"), h.Version)
	if err != nil {
		t.Fatalf("PutIf with the version after a Put: %v", err)
	}
	if got := mustHead(t, s, "m"); got.Version != v4 {
		t.Errorf("PutIf returned %s, Head says %s", v4, got.Version)
	}
	// After a delete, create-if-absent works again.
	if err := s.Delete(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIf(ctx, "m", []byte("six"), ""); err != nil {
		t.Errorf("PutIf create after Delete: %v", err)
	}
}

func testPutIfRace(t *testing.T, s store.Store) {
	const writers, rounds = 8, 6
	ctx := ctxT(t)
	if _, err := s.PutIf(ctx, "manifest", []byte("round -1"), ""); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < rounds; round++ {
		var (
			read   sync.WaitGroup // every writer has read the version
			done   sync.WaitGroup
			wins   atomic.Int32
			winner atomic.Value
			errs   = make(chan error, writers)
		)
		read.Add(writers)
		done.Add(writers)
		for w := 0; w < writers; w++ {
			go func() {
				defer done.Done()
				info, err := s.Head(ctx, "manifest")
				read.Done()
				if err != nil {
					errs <- err
					return
				}
				read.Wait()
				content := fmt.Sprintf("round %d writer %d", round, w)
				v, err := s.PutIf(ctx, "manifest", []byte(content), info.Version)
				switch {
				case err == nil:
					wins.Add(1)
					winner.Store([2]string{content, v})
				case !errors.Is(err, store.ErrPrecondition):
					errs <- fmt.Errorf("writer %d: %w", w, err)
				}
			}()
		}
		done.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d writers won, want exactly 1", round, n)
		}
		w := winner.Load().([2]string)
		if got := mustGet(t, s, "manifest"); string(got) != w[0] {
			t.Fatalf("round %d: object is %q, the winner wrote %q", round, got, w[0])
		}
		if h := mustHead(t, s, "manifest"); h.Version != w[1] {
			t.Fatalf("round %d: version is %s, the winner got %s", round, h.Version, w[1])
		}
	}
}

func testAtomicPut(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const readers = 4
	old := bytes.Repeat([]byte{'o'}, 96<<10)
	neu := bytes.Repeat([]byte{'n'}, 160<<10)
	mustPut(t, s, "obj", old)
	valid := func(b []byte) bool {
		return bytes.Equal(b, old) || bytes.Equal(b, neu)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, readers)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := s.Get(ctx, "obj")
				if err != nil {
					errs <- fmt.Errorf("Get during Put: %w", err)
					return
				}
				if !valid(b) {
					errs <- fmt.Errorf("Get during Put saw a torn object of %d bytes", len(b))
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := 0; i < 20; i++ {
		data := neu
		if i%2 == 1 {
			data = old
		}
		if err := s.Put(ctx, "obj", data); err != nil {
			t.Errorf("Put: %v", err)
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if reads.Load() == 0 {
		t.Log("readers never finished a Get while Puts ran")
	}
}

func testCancelled(t *testing.T, s store.Store) {
	mustPut(t, s, "obj", []byte("data"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want an error wrapping context.Canceled", what, err)
		}
		if errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s with a cancelled context claims not found: %v", what, err)
		}
	}
	_, err := s.ReadAt(ctx, "obj", make([]byte, 2), 0)
	check("ReadAt", err)
	_, err = s.Get(ctx, "obj")
	check("Get", err)
	rc, _, err := s.Open(ctx, "obj")
	if rc != nil {
		rc.Close()
	}
	check("Open", err)
	_, err = s.Head(ctx, "obj")
	check("Head", err)
	_, err = s.List(ctx, "")
	check("List", err)
	check("Put", s.Put(ctx, "obj2", []byte("x")))
	_, err = s.PutIf(ctx, "obj3", []byte("x"), "")
	check("PutIf", err)
	check("Delete", s.Delete(ctx, "obj"))
	if got := mustGet(t, s, "obj"); string(got) != "data" {
		t.Errorf("after cancelled calls, obj = %q", got)
	}
	for _, k := range []string{"obj2", "obj3"} {
		if _, err := s.Head(ctxT(t), k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a cancelled write created %s (Head: %v)", k, err)
		}
	}
}

func testLarge(t *testing.T, s store.Store) {
	data := pattern(6<<20+12345, 9)
	mustPut(t, s, "big", data)
	if got := mustGet(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("Get(big) returned %d bytes, different from the %d put", len(got), len(data))
	}
	p := make([]byte, 1<<20)
	off := int64(5<<20 + 7)
	n, err := s.ReadAt(ctxT(t), "big", p, off)
	if err != nil || n != len(p) || !bytes.Equal(p, data[off:off+int64(len(p))]) {
		t.Errorf("ReadAt(big, %d) = %d, %v", off, n, err)
	}
	if h := mustHead(t, s, "big"); h.Size != int64(len(data)) {
		t.Errorf("Head(big).Size = %d", h.Size)
	}
}

func testReaderAt(t *testing.T, s store.Store) {
	data := pattern(300, 1)
	mustPut(t, s, "obj", data)
	r := store.ReaderAt(ctxT(t), s, "obj")
	p := make([]byte, 100)
	if n, err := r.ReadAt(p, 250); n != 50 || err != io.EOF {
		t.Errorf("io.ReaderAt past end = %d, %v; want 50, io.EOF", n, err)
	}
	got, err := io.ReadAll(io.NewSectionReader(r, 0, 300))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("reading through io.SectionReader: %d bytes, %v", len(got), err)
	}
}

func testString(t *testing.T, s store.Store) {
	str := s.String()
	if str == "" || !strings.Contains(str, "://") {
		t.Errorf("String() = %q, want a URL", str)
	}
	if strings.Contains(str, "secret") {
		t.Errorf("String() = %q shows a secret", str)
	}
}
