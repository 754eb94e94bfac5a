//go:build cgo

package sqlitevfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/chunkd/chunkd/gen"
)

// slotFilled is the filled bit of the test's entries (a page image's).
const slotFilled = uint64(1) << 63

// slotPages is a database file's pages with a SlotFile beside them: the
// file itself is the data (page n in slot n-1), and an entries file says
// which slots are filled. It counts the reads that reach ReadPage.
type slotPages struct {
	*FilePages
	data, entries *os.File
	reads         atomic.Int64 // pages the VFS read from the slots
	calls         atomic.Int64 // ReadPage calls
}

func (p *slotPages) ReadPage(ctx context.Context, n int64, b []byte) error {
	p.calls.Add(1)
	return p.FilePages.ReadPage(ctx, n, b)
}

func (p *slotPages) SlotFile() (SlotFile, bool) {
	return SlotFile{Data: p.data, Entries: p.entries, Filled: slotFilled, Reads: &p.reads}, true
}

// newSlotPages opens the database at path with an entries file whose
// slots are filled where fill says, each with the CRC-32C of its page.
func newSlotPages(t *testing.T, path string, fill func(slot int) bool) *slotPages {
	t.Helper()
	p := &slotPages{FilePages: filePages(t, path)}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := p.PageSize()
	entries := make([]byte, 8*p.PageCount())
	tab := crc32.MakeTable(crc32.Castagnoli)
	for i := range int(p.PageCount()) {
		if fill(i) {
			binary.LittleEndian.PutUint64(entries[8*i:], slotFilled|uint64(crc32.Checksum(data[i*ps:(i+1)*ps], tab)))
		}
	}
	ep := filepath.Join(t.TempDir(), "entries")
	if err := os.WriteFile(ep, entries, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []**os.File{&p.data, &p.entries} {
		name := path
		if f == &p.entries {
			name = ep
		}
		if *f, err = os.Open(name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*f).Close() })
	}
	return p
}

// needCRC skips a test on a CPU without the CRC-32C instruction, where the
// VFS reads no slot itself.
func needCRC(t *testing.T) {
	if !slotsInC() {
		t.Skip("this CPU has no CRC-32C instruction (SSE4.2): the VFS reads slot files through Go")
	}
}

// TestSlotCRC: the C side's CRC-32C of a slot is Go's crc32.Castagnoli,
// for every page size.
func TestSlotCRC(t *testing.T) {
	needCRC(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "slots"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab := crc32.MakeTable(crc32.Castagnoli)
	rng := rand.New(rand.NewPCG(1, 2))
	for ps := 512; ps <= 65536; ps *= 2 {
		p := &slotPages{FilePages: &FilePages{f: f, pageSize: ps, pageCount: 1}, data: f, entries: f}
		var pagesRead atomic.Int64
		sr := newSlotReader(p, &pagesRead)
		if sr == nil {
			t.Fatalf("page size %d: no slot reader", ps)
		}
		b := make([]byte, ps)
		for range 20 {
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if got, want := sr.slotCRC(b), crc32.Checksum(b, tab); got != want {
				t.Fatalf("page size %d: CRC %08x, want %08x", ps, got, want)
			}
		}
		sr.unregistered()
	}
}

// TestSlotFile: the VFS reads a SlotFile's filled slots itself and
// counts them, reads the others (not filled, or failing their CRC)
// through ReadPage, picks up slots filled after it opened, and stops
// reading the file once the image is unregistered; results are the
// file's throughout.
func TestSlotFile(t *testing.T) {
	needCRC(t)
	path := testDB(t, 11, 3000)
	plain := openPlain(t, path)
	same := func(t *testing.T, name string, p *slotPages) {
		t.Helper()
		_, db := register(t, p, &Options{CacheKiB: 64})
		for _, q := range queries {
			want, wn := result(t, plain, q)
			got, gn := result(t, db, q)
			if got != want || gn != wn {
				t.Errorf("%s: %s: %d rows %s, want %d rows %s", name, q, gn, got[:8], wn, want[:8])
			}
		}
	}

	t.Run("all filled", func(t *testing.T) {
		p := newSlotPages(t, path, func(int) bool { return true })
		same(t, "all filled", p)
		// Only the header SQLite reads at open (100 bytes, not a whole
		// page) goes through Go.
		if p.reads.Load() == 0 || p.calls.Load() > 1 {
			t.Errorf("%d pages from the slots, %d through ReadPage; want all but the header from the slots", p.reads.Load(), p.calls.Load())
		}
	})

	t.Run("half filled", func(t *testing.T) {
		p := newSlotPages(t, path, func(i int) bool { return i%2 == 0 })
		same(t, "half filled", p)
		if p.reads.Load() == 0 || p.calls.Load() < 2 {
			t.Errorf("%d pages from the slots, %d through ReadPage; want both", p.reads.Load(), p.calls.Load())
		}
	})

	t.Run("bad CRC", func(t *testing.T) {
		// Every entry filled but with a CRC its bytes do not match: no
		// page is taken from the slots.
		p := newSlotPages(t, path, func(int) bool { return true })
		ep := p.entries.Name()
		b, err := os.ReadFile(ep)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(b); i += 8 {
			b[i] ^= 1
		}
		if err := os.WriteFile(ep, b, 0o644); err != nil {
			t.Fatal(err)
		}
		same(t, "bad CRC", p)
		if p.reads.Load() != 0 || p.calls.Load() == 0 {
			t.Errorf("%d pages from slots that fail their CRC, %d through ReadPage", p.reads.Load(), p.calls.Load())
		}
	})

	t.Run("filled later", func(t *testing.T) {
		p := newSlotPages(t, path, func(int) bool { return false })
		_, db := register(t, p, &Options{CacheKiB: 64})
		if _, _, err := scanAll(db, `SELECT count(*) FROM sentences`); err != nil {
			t.Fatal(err)
		}
		if p.reads.Load() != 0 {
			t.Fatalf("%d pages read from slots not filled", p.reads.Load())
		}
		// The slots are filled under the open database, as a service
		// fills an image in the background.
		full := newSlotPages(t, path, func(int) bool { return true })
		b, err := os.ReadFile(full.entries.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p.entries.Name(), b, 0o644); err != nil {
			t.Fatal(err)
		}
		calls := p.calls.Load()
		if _, _, err := scanAll(db, gen.SeedQuery); err != nil {
			t.Fatal(err)
		}
		if p.reads.Load() == 0 || p.calls.Load() != calls {
			t.Errorf("after the slots were filled: %d pages from them, %d more through ReadPage", p.reads.Load(), p.calls.Load()-calls)
		}
	})

	t.Run("unregistered", func(t *testing.T) {
		p := newSlotPages(t, path, func(int) bool { return true })
		name := fmt.Sprintf("slots-unregistered-%d", nameSeq.Add(1))
		// A scan of more than the cache must read, and fails, though
		// every slot is filled.
		scanUnregistered(t, name, p)
		if err := LastReadError(name); err != nil && !errors.Is(err, ErrUnregistered) {
			t.Errorf("last read error %v", err)
		}
	})

	t.Run("PagesRead", func(t *testing.T) {
		p := newSlotPages(t, path, func(i int) bool { return i%3 != 0 })
		d, err := OpenImage("slots", p, &Options{CacheKiB: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, _, err := scanAll(d.DB, gen.SeedQuery); err != nil {
			t.Fatal(err)
		}
		// Every page SQLite read, from the slots or through Go, counted
		// once (the header read at open counts as a page).
		if got, want := d.PageReads(), p.reads.Load()+p.calls.Load(); got != want || p.reads.Load() == 0 {
			t.Errorf("PageReads %d, want %d from the slots + %d through ReadPage", got, p.reads.Load(), p.calls.Load())
		}
	})
}
