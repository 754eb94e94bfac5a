package sqlserve

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/testdb"
)

// checkImage reads image info's files as a same-host client would and
// returns how many slots are filled; every filled slot must hold its
// chunk and match its entry's CRC.
func checkImage(t *testing.T, f *fixture, info api.ImageInfo, addrs []addr.Addr) int {
	t.Helper()
	// The entries first: a slot's bytes are written before its entry.
	entries, err := os.ReadFile(filepath.Join(f.Dir, info.Entries))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(f.Dir, info.Data))
	if err != nil {
		t.Fatal(err)
	}
	filled := 0
	for i, a := range addrs {
		e := binary.LittleEndian.Uint64(entries[8*i:])
		if e&api.ImageSlotFilled == 0 {
			continue
		}
		slot := data[i*info.SlotSize : (i+1)*info.SlotSize]
		if uint32(e) != crc32.Checksum(slot, castagnoli) || addr.Of(slot) != a {
			t.Fatalf("slot %d: entry %x, bytes hash to %s, want %s", i, e, addr.Of(slot), a)
		}
		filled++
	}
	return filled
}

func TestImages(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 60, Files: 2}, cache.Config{MemBytes: 1}, 0)
	ctx := context.Background()
	addrs := f.DB.All()
	info, err := f.s.RegisterImage(ctx, "db1", 4096, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != api.ImageName(4096, addrs) || info.Slots != len(addrs) {
		t.Fatalf("info %+v", info)
	}
	// The background fill fills every slot.
	deadline := time.Now().Add(time.Minute)
	for checkImage(t, f, info, addrs) < len(addrs) {
		if time.Now().After(deadline) {
			t.Fatalf("image never filled: %d of %d", checkImage(t, f, info, addrs), len(addrs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Registering again is the same image, and so is asking by name;
	// an image never registered is unknown, and an unknown database is
	// refused before the image is looked at.
	again, err := f.s.RegisterImage(ctx, "db1", 4096, addrs)
	if err != nil || again != info {
		t.Fatalf("second registration: %+v, %v", again, err)
	}
	if byName, err := f.s.Image(ctx, "db1", info.Name); err != nil || byName != info {
		t.Fatalf("image by name: %+v, %v", byName, err)
	}
	if _, err := f.s.Image(ctx, "db1", api.ImageName(4096, addrs[:3])); cache.KindOf(err) != cache.KindUnknownImage {
		t.Fatalf("an image never registered, by name: %v", err)
	}
	if _, err := f.s.Image(ctx, "nosuch", info.Name); cache.KindOf(err) != cache.KindUnknownDB {
		t.Fatalf("an image of an unknown database, by name: %v", err)
	}
	// A fill answers the slots' bytes (and rewrites them: rot repaired).
	path := filepath.Join(f.Dir, info.Data)
	b, _ := os.ReadFile(path)
	b[5*4096+7] ^= 1
	os.WriteFile(path, b, 0o644)
	got := map[uint32]bool{}
	err = f.s.FillImage(ctx, "db1", info.Name, []uint32{5, 9}, func(slot uint32, data []byte) error {
		if addr.Of(data) != addrs[slot] {
			t.Errorf("fill slot %d: wrong bytes", slot)
		}
		got[slot] = true
		return nil
	})
	if err != nil || len(got) != 2 {
		t.Fatalf("fill: %v, %v", got, err)
	}
	if checkImage(t, f, info, addrs) != len(addrs) {
		t.Fatal("image not whole after the repairing fill")
	}
	// Unknown images, bad slot sizes, another database's chunks.
	if err := f.s.FillImage(ctx, "db1", "nosuchimage", []uint32{1}, nil); cache.KindOf(err) != cache.KindUnknownImage {
		t.Fatalf("fill of an unknown image: %v", err)
	}
	other := []addr.Addr{addr.Of([]byte("not in db1"))}
	oi, err := f.s.RegisterImage(ctx, "db1", 4096, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.FillImage(ctx, "db1", oi.Name, []uint32{0}, func(uint32, []byte) error { return nil }); cache.KindOf(err) != cache.KindUnknownChunk {
		t.Fatalf("fill of a chunk the database does not hold: %v", err)
	}
	// Restart: the image is found again, whole; an image whose files do
	// not agree (its request rewritten) is removed.
	f.s.Close()
	os.WriteFile(filepath.Join(f.Dir, api.CacheImagesDir, oi.Name+".req"), []byte("garbage"), 0o644)
	f.restart(cache.Config{MemBytes: 1})
	if n := checkImage(t, f, info, addrs); n != len(addrs) {
		t.Fatalf("after a restart %d of %d slots", n, len(addrs))
	}
	if byName, err := f.s.Image(ctx, "db1", info.Name); err != nil || byName != info {
		t.Fatalf("image by name after a restart: %+v, %v", byName, err)
	}
	if err := f.s.FillImage(ctx, "db1", info.Name, []uint32{3}, func(uint32, []byte) error { return nil }); err != nil {
		t.Fatalf("fill after a restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, api.CacheImagesDir, oi.Name+".img")); !os.IsNotExist(err) {
		t.Fatalf("a damaged image kept: %v", err)
	}
}

// TestImageBudget: images beyond --images evict the least recently
// registered, whose files are removed.
func TestImageBudget(t *testing.T) {
	f := newFixture(t, testdb.Options{Chunks: 40, Files: 3}, cache.Config{MemBytes: 1}, 50*4096)
	ctx := context.Background()
	var infos []api.ImageInfo
	for _, file := range f.DB.Files {
		info, err := f.s.RegisterImage(ctx, "db1", 4096, file.Addrs)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	for i, info := range infos {
		_, err := os.Stat(filepath.Join(f.Dir, info.Data))
		if last := i == len(infos)-1; last != (err == nil) {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	if _, err := f.s.RegisterImage(ctx, "db1", 4096, f.DB.All()); cache.KindOf(err) != cache.KindTooLarge {
		t.Fatalf("image over the whole budget: %v", err)
	}
}
