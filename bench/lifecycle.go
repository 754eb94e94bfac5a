package bench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/internal/bank"
	"github.com/chunkd/chunkd/service"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
)

func init() {
	// The lifecycle suite's bank writer and readers are this binary run
	// again (package bank): whichever binary links the suites serves as
	// them.
	bank.Main()
	Register(suite{name: "lifecycle", run: runLifecycle,
		synopsis: "data over time: store bytes written by a first, an unchanged and a 1%-changed import; chunkd publish's lag under a bank-transfer writer and the writer's commit latency beside it; gc time and bytes freed"})
}

// countingStore counts the bytes put to a store.
type countingStore struct {
	store.Store
	puts, bytes atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, key string, data []byte) error {
	c.puts.Add(1)
	c.bytes.Add(int64(len(data)))
	return c.Store.Put(ctx, key, data)
}

func (c *countingStore) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	c.puts.Add(1)
	c.bytes.Add(int64(len(data)))
	return c.Store.PutIf(ctx, key, data, ifVersion)
}

// written runs fn and returns the bytes it put.
func (c *countingStore) written(fn func() error) (int64, error) {
	before := c.bytes.Load()
	err := fn()
	return c.bytes.Load() - before, err
}

func runLifecycle(ctx context.Context, r *Runner) error {
	cfg, rep := r.Config, r.Report
	rep.Intro = "What keeping a database for months costs: the store bytes each kind of import writes (goals: an unchanged file 0, " +
		"a first import at most 1.1× the file, a version that changes 1% of the pages at most 3× those pages' bytes), " +
		"`chunkd publish`'s lag following a database that a bank-transfer writer changes (goals at the default 1 s interval: " +
		"p50 ≤ 1.5 s, p99 ≤ 3 s; the writer's commit p99 at most 10% above its p99 without publish, same run), and what gc " +
		"takes and frees."
	sentences := pick(cfg.Scale, 10_000, 160_000, 1_250_000)
	file := filepath.Join(r.WorkDir, fmt.Sprintf("sentences-%d.sqlite", sentences))
	if _, err := os.Stat(file); err != nil {
		r.Logf("generating %s", file)
		if err := gen.Sentences(file, gen.SentencesOptions{Sentences: sentences, Translations: 2 * sentences, Seed: 1}); err != nil {
			return err
		}
	}
	storeDir := filepath.Join(r.WorkDir, "store-lifecycle")
	os.RemoveAll(storeDir)
	plain, err := store.Open(ctx, storeDir)
	if err != nil {
		return err
	}
	defer plain.Close()
	st := &countingStore{Store: plain}
	rep.Env.Set("store", "local folder (file://) %s, no emulated latency; bytes counted at the store interface (every Put and conditional Put: table files, appendix, manifest, sidecar)", storeDir)
	if err := lifecycleImports(ctx, r, st, file, sentences); err != nil {
		return err
	}
	if err := lifecyclePublish(ctx, r); err != nil {
		return err
	}
	return nil
}

// lifecycleImports measures the imports and gc on the sentences file.
func lifecycleImports(ctx context.Context, r *Runner, st *countingStore, file string, sentences int) error {
	rep := r.Report
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	rep.Env.Set("data set", "gen.Sentences, %d sentences and %d translations, seed 1: %s", sentences, 2*sentences, humanize.IBytes(uint64(fi.Size())))
	o := sqlchunks.ImportOptions{DB: "life", Appendix: true}
	var b strings.Builder
	b.WriteString("| import | store bytes written | against | ratio | goal | took |\n|---|--:|--:|--:|--:|--:|\n")
	imp := func(what string) (*sqlchunks.ImportResult, int64, error) {
		var res *sqlchunks.ImportResult
		n, err := st.written(func() (err error) {
			res, err = sqlchunks.Import(ctx, st, file, o)
			return err
		})
		r.Logf("%s: %s written", what, humanize.IBytes(uint64(n)))
		return res, n, err
	}
	first, n, err := imp("first import")
	if err != nil {
		return err
	}
	rep.Metric("first-import", "store", 0, "bytes_written", float64(n))
	rep.Metric("first-import", "store", 0, "file_bytes", float64(fi.Size()))
	fmt.Fprintf(&b, "| first | %s | the file, %s | %.3f× | ≤ 1.1× | %v |\n", humanize.IBytes(uint64(n)), humanize.IBytes(uint64(fi.Size())), float64(n)/float64(fi.Size()), first.Elapsed.Round(time.Millisecond))

	again, n, err := imp("unchanged re-import")
	if err != nil {
		return err
	}
	rep.Metric("unchanged", "store", 0, "bytes_written", float64(n))
	fmt.Fprintf(&b, "| unchanged file | %d B | | | 0 | %v |\n", n, again.Elapsed.Round(time.Millisecond))

	// 1% of the pages: rows spread over the table, the same length
	// (upper-cased), so that each changes its page in place.
	pageSize := int64(first.PageSize)
	var changedBytes, written int64
	var changes int
	versions := pick(r.Config.Scale, 6, 20, 20)
	for v := 1; v < versions; v++ {
		before, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		// Rows spread over the pages, some two to a page: 1.35 rows for
		// each page to change made about 1% changed pages.
		every := max(1, int(float64(sentences)/(0.0135*float64(first.Pages))))
		if err := execSQLite(file, fmt.Sprintf(`UPDATE sentences SET Text = CASE WHEN Text = upper(Text) THEN lower(Text) ELSE upper(Text) END WHERE SentenceId %% %d = %d`, every, v%every)); err != nil {
			return err
		}
		after, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		changed := changedPages(before, after, int(pageSize))
		res, n, err := imp(fmt.Sprintf("version %d (%d pages changed)", v+1, changed))
		if err != nil {
			return err
		}
		if res.AppendixFile != "" { // the appendix rule's own full copy
			rep.Notef("Version %d passed the appendix threshold and wrote a new appendix (%s); it is left out of the 1%% figure.", v+1, humanize.IBytes(uint64(res.AppendixBytes)))
			continue
		}
		changes++
		changedBytes += int64(changed) * pageSize
		written += n
	}
	if changes > 0 {
		rep.Metric("change-1pct", "store", 0, "bytes_written", float64(written)/float64(changes))
		rep.Metric("change-1pct", "store", 0, "changed_page_bytes", float64(changedBytes)/float64(changes))
		fmt.Fprintf(&b, "| a version changing 1%% of the pages (mean of %d; %.2f%% changed) | %s | the changed pages, %s | %.2f× | ≤ 3× | |\n", changes,
			100*float64(changedBytes)/float64(changes)/float64(first.Pages*pageSize),
			humanize.IBytes(uint64(written/int64(changes))), humanize.IBytes(uint64(changedBytes/int64(changes))), float64(written)/float64(changedBytes))
	}
	b.WriteString("\nA changed page costs its page, the page-map leaf above it (20 KiB for 1,000 pages, shared by the changed pages under it), the root, and a table file's index and footer.\n")
	rep.Section("Store bytes per import", b.String())

	// gc of the versions made above, keeping 3.
	start := time.Now()
	res, err := sqlchunks.Collect(ctx, st, sqlchunks.CollectOptions{DB: "life", Keep: 3, Grace: -1})
	if err != nil {
		return err
	}
	took := time.Since(start)
	rep.Metric("gc", "store", 0, "seconds", took.Seconds())
	rep.Metric("gc", "store", 0, "bytes_freed", float64(res.DeletedBytes))
	rep.Metric("gc", "store", 0, "table_bytes_after", float64(res.TableBytesAfter))
	rep.Section("gc", fmt.Sprintf("`chunkd gc --keep 3 --grace 0` of %d versions: %d retained, %d collected; %d table files deleted, %s freed "+
		"(table files %s before, %s after; %d repacked into %s); took %v.\n",
		len(res.Retained)+len(res.Collected), len(res.Retained), len(res.Collected), len(res.Deleted), humanize.IBytes(uint64(res.DeletedBytes)),
		humanize.IBytes(uint64(res.TableBytesBefore)), humanize.IBytes(uint64(res.TableBytesAfter)), len(res.Repacked), humanize.IBytes(uint64(res.NewFileBytes)), took.Round(time.Millisecond)))
	return nil
}

// execSQLite runs statements on a local SQLite file.
func execSQLite(path string, stmts ...string) error {
	db, err := sql.Open(sqlitevfs.DriverName, "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// changedPages counts the pages of b that differ from a's (or that a
// lacks).
func changedPages(a, b []byte, pageSize int) int {
	n := 0
	for off := 0; off < len(b); off += pageSize {
		end := min(off+pageSize, len(b))
		if end > len(a) || !bytes.Equal(a[off:end], b[off:end]) {
			n++
		}
	}
	return n
}

// lifecyclePublish measures chunkd publish under a bank-transfer writer:
// phases of the writer alone and with a Publisher, alternating; reader
// processes note when each version becomes the head.
func lifecyclePublish(ctx context.Context, r *Runner) error {
	cfg, rep := r.Config, r.Report
	accounts := pick(cfg.Scale, 1000, 10_000, 100_000)
	rate := pick(cfg.Scale, 50, 100, 200)
	phase := durationOr(cfg.Duration, pick(cfg.Scale, 2*time.Second, 10*time.Second, 30*time.Second))
	interval := sqlchunks.DefaultPublishInterval
	path := filepath.Join(r.WorkDir, "bank.sqlite")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
	if err := bank.Create(path, accounts, true); err != nil {
		return err
	}
	// The store is not the writer's disk (an object store never is): in
	// memory (tmpfs) where there is one, so that publish's puts do not
	// queue behind the writer's fsyncs on one device.
	storeDir, where := filepath.Join(r.WorkDir, "store-bank"), "the work dir"
	if d, err := os.MkdirTemp("/dev/shm", "chunkd-bench-store-"); err == nil {
		storeDir, where = d, "tmpfs (/dev/shm)"
	}
	defer os.RemoveAll(storeDir)
	st, err := store.Open(ctx, storeDir)
	if err != nil {
		return err
	}
	defer st.Close()
	rep.Env.Set("publish", "a bank of %d accounts (WAL, synchronous=FULL), a writer process making %d transfers a second (each its own transaction); "+
		"chunkd publish at --interval %v in the suite's process, into a local folder store in %s; 2 reader processes polling the manifest every 10 ms, "+
		"reading every version through a cache service (in the suite's process) the moment they see it, checking it (sum of balances) and noting when each became the head. Phases of %v, writer alone and with publish, alternating, 3 of each, with no reader (the commit latencies); then one of twice that with publish and the readers (the lag)",
		accounts, rate, interval, where, phase)
	w, err := bank.StartWriter(path, rate)
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		commits []bank.Commit
	)
	got := make(chan struct{})
	go func() {
		defer close(got)
		for c := range w.Commits() {
			mu.Lock()
			commits = append(commits, c)
			mu.Unlock()
		}
	}()
	var ownLags []time.Duration // as the publisher reports them, a version each
	p, err := sqlchunks.NewPublisher(st, sqlchunks.PublishOptions{DB: "bank", Path: path, Interval: interval, Appendix: true,
		OnVersion: func(pub sqlchunks.Published) {
			if !pub.Unchanged {
				ownLags = append(ownLags, pub.Lag())
			}
		}})
	if err != nil {
		w.Stop()
		return err
	}
	type span struct {
		from, to time.Time
		on, lag  bool
	}
	var spans []span
	phaseRun := func(i int, on, lag bool, d time.Duration) {
		from := time.Now()
		r.Logf("publish: phase %d, publish %v, readers %v", i, on, lag)
		if on {
			pctx, cancel := context.WithTimeout(ctx, d)
			p.Run(pctx)
			cancel()
		} else {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		spans = append(spans, span{from, time.Now(), on, lag})
	}
	// The writer alone and with publish, alternating, no reader running:
	// its commit latency.
	for i := range 6 {
		phaseRun(i+1, i%2 == 1, false, phase)
	}
	// Then publish with the readers: the lag, and every version checked.
	// They read each version through a cache service over the store, by
	// its root, the moment they see it in the manifest.
	cacheDir, err := os.MkdirTemp(r.Config.CacheDir, "lifecycle-")
	if err != nil {
		w.Stop()
		return err
	}
	defer os.RemoveAll(cacheDir)
	svc, err := service.Start(service.Config{Cache: cache.Config{Store: st, CacheDir: cacheDir, NoFsync: !r.Config.Fsync}, HTTP: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.Stop()
		return err
	}
	defer svc.Close()
	var readers []*bank.Reader
	for range 2 {
		rd, err := bank.StartReader(storeDir, "bank", svc.URL())
		if err != nil {
			w.Stop()
			return err
		}
		readers = append(readers, rd)
	}
	time.Sleep(100 * time.Millisecond)
	phaseRun(7, true, true, 2*phase)
	w.Stop()
	<-got
	// Let the readers see the last version.
	time.Sleep(200 * time.Millisecond)
	var seen []bank.Seen
	bad := 0
	for _, rd := range readers {
		rd.Stop()
		for s := range rd.Seen() {
			if s.Err != "" || !s.State.Consistent() {
				bad++
			}
			seen = append(seen, s)
		}
	}
	if bad > 0 {
		return fmt.Errorf("publish: %d of %d versions the readers checked did not read or broke the sum of balances", bad, len(seen))
	}
	// Lag: from a commit made while publish ran to a reader seeing a head
	// that holds it, for the commits published before the phase ended (and
	// its round in flight; later ones waited for the next phase).
	var alone, with, inPublish []time.Duration
	first := bank.FirstSeen(commits, seen)
	for i, c := range commits {
		for _, s := range spans {
			if c.At.Before(s.from) || !c.At.Before(s.to) {
				continue
			}
			switch {
			case s.lag:
				if !first[i].IsZero() && first[i].Before(s.to.Add(interval)) {
					inPublish = append(inPublish, first[i].Sub(c.At))
				}
			case s.on:
				with = append(with, c.Latency)
			default:
				alone = append(alone, c.Latency)
			}
		}
	}
	if len(inPublish) == 0 {
		return errors.New("publish: the readers saw no version holding a commit made while publish ran")
	}
	addLat := func(cs, path string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		rep.Add(Result{Suite: rep.Suite, Case: cs, Path: path, Threads: 1, Count: int64(len(ds)), MeanUS: us(sum / time.Duration(len(ds))),
			P50US: us(bank.Percentile(ds, 50)), P95US: us(bank.Percentile(ds, 95)), P99US: us(bank.Percentile(ds, 99)), Runs: 1})
		rep.Samples(cs, path, 1, ds)
	}
	addLat("commit", "writer-alone", alone)
	addLat("commit", "with-publish", with)
	// Lag: per commit as the readers saw it, and per version as the
	// publisher reports it (from the change it saw to the manifest).
	addLat("publish-lag", "reader-seen", inPublish)
	addLat("publish-lag", "publisher", ownLags)
	st2 := p.Stats()
	p50a, p99a, p99w := bank.Percentile(alone, 50), bank.Percentile(alone, 99), bank.Percentile(with, 99)
	rep.Metric("publish-lag", "reader-seen", 1, "p50_seconds", bank.Percentile(inPublish, 50).Seconds())
	rep.Metric("publish-lag", "reader-seen", 1, "p99_seconds", bank.Percentile(inPublish, 99).Seconds())
	rep.Metric("commit", "with-publish", 1, "p99_over_alone", float64(p99w)/float64(max(p99a, 1)))
	rep.Metric("publish", "store", 1, "versions", float64(st2.Versions))
	rep.Metric("publish", "store", 1, "bytes_written", float64(st2.StoreBytes))
	rep.Section("Publish lag and the writer beside it", fmt.Sprintf(
		"%d transfers; %d versions published (%s written, %s a version); the readers checked %d versions, all keeping the sum of balances.\n\n"+
			"| figure | value | goal |\n|---|--:|--:|\n"+
			"| lag p50 (commit to a reader seeing a head that holds it) | %v | ≤ 1.5 s |\n| lag p99 | %v | ≤ 3 s |\n"+
			"| lag p50 / p99 as the publisher reports it, a version each | %v / %v | |\n"+
			"| writer commit p50 / p99, alone | %v / %v | |\n| writer commit p50 / p99, with publish | %v / %v | p99 ≤ 1.10× alone (%.2f×) |\n",
		len(commits), st2.Versions, humanize.IBytes(uint64(st2.StoreBytes)), humanize.IBytes(uint64(st2.StoreBytes/max(st2.Versions, 1))), len(seen),
		bank.Percentile(inPublish, 50).Round(time.Millisecond), bank.Percentile(inPublish, 99).Round(time.Millisecond),
		bank.Percentile(ownLags, 50).Round(time.Millisecond), bank.Percentile(ownLags, 99).Round(time.Millisecond),
		p50a.Round(time.Microsecond), p99a.Round(time.Microsecond), bank.Percentile(with, 50).Round(time.Microsecond), p99w.Round(time.Microsecond),
		float64(p99w)/float64(max(p99a, 1))))
	return nil
}
