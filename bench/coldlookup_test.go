package bench

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// BenchmarkColdFirstLookup measures a fresh process's first point lookup
// through a service just started, with nothing on its disk, over a store
// 20 ms away (100 MB/s a stream): the wall time from opening the client
// to the row, counted from when the service had loaded the database (its
// own manifest and index reads), less the same with the files on the
// service's disk, in store round trips (round-trips/op: the time it
// waited for the store), and the store requests it made meanwhile (store-requests/op, and
// sequential/op: the most of them that ran one after the other). The goal
// is at most 2 round trips: the open set comes from the start of the
// appendix, which the download's first stream brings, and the page the
// lookup needs from one more read.
//
//	go test -run '^$' -bench ColdFirstLookup -benchtime 5x ./bench/
func BenchmarkColdFirstLookup(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	file := filepath.Join(dir, "s.sqlite")
	if err := gen.Sentences(file, gen.SentencesOptions{Sentences: 160_000, Translations: 320_000, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	plain, err := store.Open(ctx, filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	if _, err := sqlchunks.Import(ctx, plain, file, sqlchunks.ImportOptions{DB: "s", Appendix: true}); err != nil {
		b.Fatal(err)
	}
	const rtt = 20 * time.Millisecond
	far := store.WithLatency(plain, rtt, 100<<20)
	var waited time.Duration
	var reqs, seq int
	for i := range b.N {
		rec := &requestLog{Store: far}
		svc, err := service.Start(service.Config{Cache: cache.Config{Store: rec, CacheDir: b.TempDir()}, HTTP: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Cache.LoadDB(ctx, "s"); err != nil {
			b.Fatal(err)
		}
		rec.reset()
		start := time.Now()
		d, err := openTierDB(ctx, tierOpts{store: far, db: "s", service: svc.URL(), log: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		var text string
		if err := d.QueryRowContext(ctx, "SELECT Text FROM sentences WHERE SentenceId = ?", 150_001+i).Scan(&text); err != nil {
			b.Fatal(err)
		}
		cold := time.Since(start)
		rs := rec.all()
		reqs += len(rs)
		seq += sequential(rs)
		d.close()
		// The same once the files are on disk: what the lookup costs
		// without the store.
		if err := svc.Cache.WaitCached(ctx, "s", time.Minute, func(ti api.TableInfo) bool { return ti.Appendix }); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if d, err = openTierDB(ctx, tierOpts{store: far, db: "s", service: svc.URL(), log: io.Discard}); err != nil {
			b.Fatal(err)
		}
		if err := d.QueryRowContext(ctx, "SELECT Text FROM sentences WHERE SentenceId = ?", 150_001+i).Scan(&text); err != nil {
			b.Fatal(err)
		}
		waited += cold - time.Since(start)
		d.close()
		svc.Close()
	}
	b.ReportMetric(float64(waited)/float64(rtt)/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(reqs)/float64(b.N), "store-requests/op")
	b.ReportMetric(float64(seq)/float64(b.N), "sequential/op")
}

// sequential returns the most requests of rs that ran one after another:
// the longest chain in which each began once the one before had answered.
func sequential(rs []request) int {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b request) int { return a.start.Compare(b.start) })
	chain := make([]int, len(rs))
	most := 0
	for i, r := range rs {
		chain[i] = 1
		for j := range i {
			if !rs[j].end.After(r.start) {
				chain[i] = max(chain[i], chain[j]+1)
			}
		}
		most = max(most, chain[i])
	}
	return most
}

// requestLog records when each store request began and answered (a
// stream: when it opened).
type requestLog struct {
	store.Store
	mu   sync.Mutex
	reqs []request
}

type request struct{ start, end time.Time }

func (l *requestLog) add(start time.Time) {
	l.mu.Lock()
	l.reqs = append(l.reqs, request{start, time.Now()})
	l.mu.Unlock()
}

func (l *requestLog) reset() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
}

func (l *requestLog) all() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]request(nil), l.reqs...)
}

func (l *requestLog) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	defer l.add(time.Now())
	return l.Store.ReadAt(ctx, key, p, off)
}

func (l *requestLog) Get(ctx context.Context, key string) ([]byte, error) {
	defer l.add(time.Now())
	return l.Store.Get(ctx, key)
}

func (l *requestLog) Head(ctx context.Context, key string) (store.Info, error) {
	defer l.add(time.Now())
	return l.Store.Head(ctx, key)
}

func (l *requestLog) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	defer l.add(time.Now())
	return store.ReadTail(ctx, l.Store, key, p)
}

func (l *requestLog) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	defer l.add(time.Now())
	return store.OpenRange(ctx, l.Store, key, off, n)
}

func TestSequential(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	rs := []request{
		{start: at(0), end: at(20)},  // the root chunk
		{start: at(1), end: at(22)},  // a stream, beside it
		{start: at(25), end: at(45)}, // the leaf, after both
		{start: at(30), end: at(50)}, // a background stream, beside the leaf
	}
	if got := sequential(rs); got != 2 {
		t.Fatalf("sequential = %d, want 2", got)
	}
	if got := sequential(append(rs, request{start: at(50), end: at(70)})); got != 3 {
		t.Fatalf("with one more after the last: %d, want 3", got)
	}
	if got := sequential(nil); got != 0 {
		t.Fatalf("no requests: %d, want 0", got)
	}
}
