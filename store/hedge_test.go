package store_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/internal/faultstore"
	"github.com/chunkd/chunkd/store"
	_ "github.com/chunkd/chunkd/store/folder"
)

// hedgeFixture is a folder store with one object, behind a fault store
// (stalls) and an emulated round trip.
func hedgeFixture(t *testing.T, rtt time.Duration) (*faultstore.Store, *store.Hedged, []byte) {
	t.Helper()
	ctx := context.Background()
	dir, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 8192)
	if err := dir.Put(ctx, "db/table", data); err != nil {
		t.Fatal(err)
	}
	fs := &faultstore.Store{Store: store.WithLatency(dir, rtt, 0)}
	return fs, store.Hedge(fs, store.HedgeOptions{}), data
}

// A store that never answers one read in twenty: every read still
// answers (the stalled request waits for its context, a minute away), the
// right bytes, because the read was hedged once its deadline passed.
func TestHedgeStall(t *testing.T) {
	fs, h, data := hedgeFixture(t, 2*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs.StallEvery.Store(20)
	p := make([]byte, 4096)
	for i := range 200 {
		off := int64(i * 512)
		n, err := h.ReadAt(ctx, "db/table", p, off)
		if err != nil || !bytes.Equal(p[:n], data[off:off+4096]) {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
	}
	for i := range 40 {
		rc, err := h.OpenRange(ctx, "db/table", int64(i), 1000)
		if err != nil {
			t.Fatalf("range %d: %v", i, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data[i:i+1000]) {
			t.Fatalf("range %d: %d bytes, %v", i, len(got), err)
		}
	}
	st := h.Stats()
	if fs.Stalled.Load() == 0 || st.Wins == 0 || st.Wins > st.Hedges {
		t.Fatalf("stalled %d, %+v: no hedge won", fs.Stalled.Load(), st)
	}
	t.Logf("%d stalls, %+v, deadline %v", fs.Stalled.Load(), st, h.Deadline(4096))
}

// Under a store with no stalls, hedges are few: at most the budget's
// ratio of reads, and in practice the reads slower than the percentile.
func TestHedgeSteady(t *testing.T) {
	_, h, _ := hedgeFixture(t, 3*time.Millisecond)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 1000)
			for i := range 100 {
				if _, err := h.ReadAt(ctx, "db/table", p, int64(g*1000+i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := h.Stats()
	if st.Reads != 400 || float64(st.Hedges) > 0.1*float64(st.Reads)+10 {
		t.Fatalf("%+v: more hedges than the budget allows", st)
	}
	if d := h.Deadline(1000); d < 3*time.Millisecond {
		t.Fatalf("deadline %v, below the store's round trip", d)
	}
	t.Logf("%+v, deadline %v", st, h.Deadline(1000))
}

// A store slow for every read sends at most the budget's hedges: it is
// not asked twice as often.
func TestHedgeBudget(t *testing.T) {
	fs, h, _ := hedgeFixture(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := make([]byte, 100)
	// Teach the hedger a fast store, then stall every other read.
	for range 50 {
		if _, err := h.ReadAt(ctx, "db/table", p, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := h.Stats()
	fs.StallEvery.Store(2)
	done := 0
	for range 100 {
		rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if _, err := h.ReadAt(rctx, "db/table", p, 0); err == nil {
			done++
		}
		rcancel()
	}
	st := h.Stats()
	hedges := st.Hedges - before.Hedges
	if max := 0.1*float64(st.Reads) + 10; float64(hedges) > max {
		t.Fatalf("%d hedges for %d reads, more than the budget's %.0f", hedges, st.Reads, max)
	}
	if hedges == 0 || done == 100 {
		t.Fatalf("%d hedges, %d of 100 reads answered: the budget did not run out", hedges, done)
	}
}

// A read that fails is not hedged and returns its error.
func TestHedgeError(t *testing.T) {
	_, h, _ := hedgeFixture(t, 0)
	_, err := h.ReadAt(context.Background(), "db/none", make([]byte, 10), 0)
	if err == nil || h.Stats().Hedges != 0 {
		t.Fatalf("read of a missing object: %v, %+v", err, h.Stats())
	}
}

// elsewhereStore answers every read as a wrapper that reads from a copy
// beside the store does (a cluster's peers): marked elsewhere (Origin).
type elsewhereStore struct{ store.Store }

func (e elsewhereStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	store.MarkElsewhere(ctx)
	return e.Store.ReadAt(ctx, key, p, off)
}

func (e elsewhereStore) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	store.MarkElsewhere(ctx)
	return store.OpenRange(ctx, e.Store, key, off, n)
}

// Reads answered from elsewhere than the store keep that mark for the
// caller (a hedged read is still one read of a copy, not of the store),
// and their latencies do not set the store's hedge deadline.
func TestHedgeElsewhere(t *testing.T) {
	fs, _, data := hedgeFixture(t, 0)
	h := store.Hedge(elsewhereStore{fs}, store.HedgeOptions{Initial: time.Second})
	p := make([]byte, 4096)
	for i := range 40 {
		ctx, origin := store.TrackOrigin(context.Background())
		if _, err := h.ReadAt(ctx, "db/table", p, int64(i)); err != nil || !bytes.Equal(p, data[i:i+4096]) {
			t.Fatalf("read %d: %v", i, err)
		}
		if !origin.Elsewhere() {
			t.Fatalf("read %d: not marked elsewhere", i)
		}
		ctx, origin = store.TrackOrigin(context.Background())
		rc, err := h.OpenRange(ctx, "db/table", int64(i), 100)
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if !origin.Elsewhere() {
			t.Fatalf("stream %d: not marked elsewhere", i)
		}
	}
	if d := h.Deadline(4096); d != time.Second {
		t.Fatalf("deadline %v after reads answered elsewhere, want the initial 1s", d)
	}
	if d := h.Typical(4096); d != 0 {
		t.Fatalf("typical %v after reads answered elsewhere, want none known", d)
	}
}
