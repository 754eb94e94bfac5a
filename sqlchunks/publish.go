package sqlchunks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/internal/background"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
)

// DefaultPublishInterval is PublishOptions.Interval's default.
const DefaultPublishInterval = time.Second

// PublishOptions configure a Publisher.
type PublishOptions struct {
	// DB is the database's name in the store.
	DB string
	// Path is the SQLite database file another process writes.
	Path string
	// Interval is the least time between two versions (0: 1s).
	Interval time.Duration
	// Message is recorded in each version ("" : "chunkd publish").
	Message string
	// Appendix and AppendixThreshold are as for Import.
	Appendix          bool
	AppendixThreshold float64
	// Logger gets a line per version and the errors gone through (nil:
	// slog.Default()).
	Logger *slog.Logger
	// OnVersion, if set, is called after each version is published (and
	// after a change that turned out to publish nothing, with Unchanged).
	OnVersion func(Published)
}

// Published is one round of a Publisher.
type Published struct {
	*ImportResult
	// Seen is when the Publisher first saw the database changed since the
	// last round began (at most a poll after the commit); Done when the
	// version was in the store's manifest.
	Seen, Done time.Time
}

// Lag is how long the changes took to be published: from when they were
// seen until the manifest named them.
func (p Published) Lag() time.Duration { return p.Done.Sub(p.Seen) }

// PublishStats are a Publisher's counters.
type PublishStats struct {
	// Versions counts the versions published, Unchanged the rounds that
	// found the database as it was, Failed the rounds that failed (and
	// were tried again).
	Versions, Unchanged, Failed int64
	// Head is the last version published (or found unchanged).
	Head addr.Addr
	// LastLag is the last version's lag; Behind how long a change seen has
	// waited to be published (0 when none waits): the lag now.
	LastLag, Behind time.Duration
	// StoreBytes is every byte the versions put.
	StoreBytes int64
}

// Publisher follows a SQLite database that another process writes and
// publishes a version of it after its commits, at most one per interval.
//
// It keeps one read-only connection to the database and asks it, every
// poll (a tenth of the interval, 10 to 100 ms), whether another connection
// committed (PRAGMA data_version: in WAL mode a read of SQLite's shared
// memory; in rollback-journal mode the read lock for a moment). After a
// commit, once the interval since the last round has passed, it reads the
// whole database in one read transaction through SQLite
// (sqlite3_serialize: the pager's pages, the WAL's committed frames
// included), so a version is always a state some commit left, never a
// torn page nor half a transaction; the writer is held up by nothing
// but that read lock (in WAL mode, not at all). A round runs on one
// thread at the lowest CPU priority (package background), so that it
// yields the cores to the writer. It then imports the
// image as Import does - hashing only the pages whose fast hash changed
// since the last round (pageMemo), writing only the chunks the database
// lacks - and commits it by the manifest's compare-and-swap.
//
// A restart of the Publisher (it keeps nothing on disk) reads and hashes
// the whole database once, and publishes nothing if it is the head
// already; a restart of the writer is a commit like another (in rollback
// mode, a hot journal a dead writer left makes reads fail until a writer
// rolls it back: the round is tried again). A failed round is logged and
// tried again at the next poll, waiting up to 30 s after failures in a
// row.
type Publisher struct {
	s   store.Store
	o   PublishOptions
	log *slog.Logger

	mu    sync.Mutex
	stats PublishStats
	seen  time.Time // a change seen and not yet published; zero if none
}

// NewPublisher checks o and returns a Publisher; Run runs it.
func NewPublisher(s store.Store, o PublishOptions) (*Publisher, error) {
	check := ImportOptions{DB: o.DB, Message: o.Message, AppendixThreshold: o.AppendixThreshold}
	if err := check.check(s); err != nil {
		return nil, err
	}
	if o.Path == "" {
		return nil, errors.New("sqlchunks: publish: no database file")
	}
	if _, _, err := checkSource(o.Path); err != nil {
		return nil, fmt.Errorf("sqlchunks: publish: %w", err)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultPublishInterval
	}
	if o.Message == "" {
		o.Message = "chunkd publish"
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{s: s, o: o, log: log}, nil
}

// Stats returns the Publisher's counters.
func (p *Publisher) Stats() PublishStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	if !p.seen.IsZero() {
		st.Behind = time.Since(p.seen)
	}
	return st
}

// poll is how often the Publisher asks whether the database changed.
func (p *Publisher) poll() time.Duration {
	return min(max(p.o.Interval/10, 10*time.Millisecond), 100*time.Millisecond)
}

// Run publishes until ctx is done, and returns nil then: a round under
// way when ctx ends is finished first (its store requests are not
// cancelled). The first round runs at once.
func (p *Publisher) Run(ctx context.Context) error {
	live, err := openLive(ctx, p.o.Path)
	if err != nil {
		return fmt.Errorf("sqlchunks: publish %s: %w", p.o.Path, err)
	}
	defer live.Close()
	mdb, err := manifest.Open(ctx, p.s, p.o.DB)
	if err != nil {
		return err
	}
	work := context.WithoutCancel(ctx) // a round in flight finishes
	memo := &pageMemo{}
	var (
		h        *head
		dv       int64
		dvAt     time.Time // when data_version last read dv
		last     time.Time // the last round's start
		failures int
		retryAt  time.Time
	)
	p.setSeen(time.Now())
	tick := time.NewTicker(p.poll())
	defer tick.Stop()
	for {
		now := time.Now()
		if v, err := live.dataVersion(work); err == nil {
			// A change committed after the last read that found none:
			// counting from that read, the lag is an upper bound.
			if !dvAt.IsZero() && v != dv {
				p.setSeenOnce(dvAt)
			}
			dv, dvAt = v, now
		}
		if seen := p.seenAt(); !seen.IsZero() && now.Sub(last) >= p.o.Interval && !now.Before(retryAt) {
			last = now
			p.clearSeen()
			var pub *Published
			background.Run(func() { pub, h, err = p.round(work, live, mdb, h, memo, seen) })
			if err != nil {
				failures++
				wait := min(p.poll()<<min(failures, 10), 30*time.Second)
				retryAt = time.Now().Add(wait)
				p.setSeenOnce(seen)
				p.count(func(st *PublishStats) { st.Failed++ })
				p.log.Warn("publish failed; trying again", "db", p.o.DB, "file", p.o.Path, "in", wait, "err", err)
			} else {
				failures = 0
				p.done(pub)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// round reads the database and imports it on top of head h (nil: load
// it), returning the version and the head it went on.
func (p *Publisher) round(ctx context.Context, live *liveSource, mdb *manifest.DB, h *head, memo *pageMemo, seen time.Time) (*Published, *head, error) {
	img, err := live.image(ctx)
	if err != nil {
		return nil, h, err
	}
	src, err := imageSource(img)
	if err != nil {
		return nil, h, fmt.Errorf("%s: %w", p.o.Path, err)
	}
	if h, err = loadHead(ctx, mdb, h); err != nil {
		return nil, nil, err
	}
	o := &ImportOptions{DB: p.o.DB, Message: p.o.Message, Appendix: p.o.Appendix, AppendixThreshold: p.o.AppendixThreshold, memo: memo, inMemory: true, oneThread: true}
	start := time.Now()
	res, h2, err := importSource(ctx, mdb, h, src, o)
	if err != nil {
		return nil, nil, err // load the head again next time
	}
	res.Elapsed = time.Since(start)
	// The next round loads the manifest again, reusing h2's open files.
	return &Published{ImportResult: res, Seen: seen, Done: time.Now()}, h2, nil
}

// imageSource checks a serialized database and makes it an import's
// source, marked a rollback-journal database (see openSnapshot).
func imageSource(img []byte) (*source, error) {
	if len(img) < 100 || string(img[:16]) != "SQLite format 3\x00" {
		return nil, fmt.Errorf("read %d bytes that are no SQLite database", len(img))
	}
	ps := pageSizeOf(img)
	if !isPageSize(ps) || len(img)%ps != 0 {
		return nil, fmt.Errorf("read an image of %d bytes with page size %d", len(img), ps)
	}
	if img[18] == 2 || img[19] == 2 {
		img[18], img[19] = 1, 1
	}
	return &source{r: bytes.NewReader(img), pageSize: ps, pages: int64(len(img) / ps)}, nil
}

// done counts and logs a round that succeeded.
func (p *Publisher) done(pub *Published) {
	p.count(func(st *PublishStats) {
		st.Head = pub.Root
		st.StoreBytes += pub.StoreBytes
		if pub.Unchanged {
			st.Unchanged++
			return
		}
		st.Versions++
		st.LastLag = pub.Lag()
	})
	if pub.Unchanged {
		p.log.Debug("database unchanged", "db", p.o.DB, "version", pub.Root)
	} else {
		p.log.Info("published", "db", p.o.DB, "version", pub.Root, "lag", pub.Lag().Round(time.Millisecond),
			"pages", pub.Pages, "new_chunks", pub.NewChunks, "bytes", pub.StoreBytes, "took", pub.Elapsed.Round(time.Millisecond))
	}
	if p.o.OnVersion != nil {
		p.o.OnVersion(*pub)
	}
}

func (p *Publisher) count(fn func(*PublishStats)) {
	p.mu.Lock()
	fn(&p.stats)
	p.mu.Unlock()
}

func (p *Publisher) seenAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

func (p *Publisher) setSeen(t time.Time) {
	p.mu.Lock()
	p.seen = t
	p.mu.Unlock()
}

// setSeenOnce notes a change seen at t unless one waits already.
func (p *Publisher) setSeenOnce(t time.Time) {
	p.mu.Lock()
	if p.seen.IsZero() || t.Before(p.seen) {
		p.seen = t
	}
	p.mu.Unlock()
}

func (p *Publisher) clearSeen() { p.setSeen(time.Time{}) }
