package sqlchunks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
)

// The gc record is a small JSON object beside a database's manifest,
// "chunkd.gc", that chunkd gc keeps:
//
//	{"format":"chunkd.gc.v1",
//	 "collected":[{"root":"…","parent":"…","time":1700000000,"pages":634,
//	               "page_size":4096,"new_bytes":30933,"message":"…",
//	               "collected":1700003600}, …],
//	 "unnamed":{"<table file key>":1700003600, …}}
//
// collected lists the versions gc collected, newest first, at most
// maxRecorded of them (a message is cut to maxRecordedMessage bytes):
// chunkd log shows them, and the cache service tells a request for one
// from one for a root no version has. unnamed lists the table files of
// the database that its manifest does not name, each with the time gc
// first found it so; gc deletes a file once it has been unnamed, and
// written, longer than the grace period.
//
// The record is a hint, never the truth about data: losing it (a crash, a
// concurrent gc's write) only delays a deletion or forgets what was
// collected; a file it lists is deleted only if the manifest read just
// before does not name it.
const (
	// RecordName is the gc record's object name in the database's prefix.
	RecordName   = "chunkd.gc"
	recordFormat = "chunkd.gc.v1"

	maxRecorded        = 10000
	maxRecordedMessage = 200
	maxRecordSize      = 64 << 20
)

// recordJSON is the gc record's JSON.
type recordJSON struct {
	Format    string            `json:"format"`
	Collected []recordedVersion `json:"collected,omitempty"`
	Unnamed   map[string]int64  `json:"unnamed,omitempty"`
}

// recordedVersion is a collected version in the gc record.
type recordedVersion struct {
	Root      string `json:"root"`
	Parent    string `json:"parent,omitempty"`
	Time      int64  `json:"time"`
	Pages     int64  `json:"pages"`
	PageSize  int    `json:"page_size"`
	NewBytes  *int64 `json:"new_bytes,omitempty"`
	Message   string `json:"message,omitempty"`
	Collected int64  `json:"collected"`
}

func recordVersion(v Version, at time.Time) recordedVersion {
	r := recordedVersion{Root: v.Root.String(), Time: v.Time.Unix(), Pages: v.Pages, PageSize: v.PageSize,
		Message: clipMessage(v.Message), Collected: at.Unix()}
	if !v.Parent.IsEmpty() {
		r.Parent = v.Parent.String()
	}
	if v.NewBytes >= 0 {
		n := v.NewBytes
		r.NewBytes = &n
	}
	return r
}

func (r recordedVersion) version() (Version, error) {
	v := Version{Time: time.Unix(r.Time, 0), Pages: r.Pages, PageSize: r.PageSize, Message: r.Message, NewBytes: -1, Collected: time.Unix(r.Collected, 0)}
	var err error
	if v.Root, err = addr.Parse(r.Root); err != nil {
		return v, err
	}
	if r.Parent != "" {
		if v.Parent, err = addr.Parse(r.Parent); err != nil {
			return v, err
		}
	}
	if r.NewBytes != nil {
		v.NewBytes = *r.NewBytes
	}
	return v, nil
}

// clipMessage cuts a message to maxRecordedMessage bytes, at a rune.
func clipMessage(m string) string {
	if len(m) <= maxRecordedMessage {
		return m
	}
	n := maxRecordedMessage
	for n > 0 && m[n]&0xc0 == 0x80 {
		n--
	}
	return m[:n] + "…"
}

// record is a database's gc record, as read.
type record struct {
	recordJSON
	byRoot map[addr.Addr]Version
}

func recordKey(mdb *manifest.DB) string {
	if mdb.Name() == "" {
		return RecordName
	}
	return mdb.Name() + "/" + RecordName
}

// loadRecord reads the gc record of mdb; a database without one has an
// empty record.
func loadRecord(ctx context.Context, mdb *manifest.DB) (*record, error) {
	key := recordKey(mdb)
	data, err := mdb.Store().Get(ctx, key)
	r := &record{recordJSON: recordJSON{Format: recordFormat}, byRoot: map[addr.Addr]Version{}}
	if errors.Is(err, store.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("database %s: read %s: %w", mdb, key, err)
	}
	if len(data) > maxRecordSize {
		return nil, fmt.Errorf("database %s: %s is larger than %d bytes; not a gc record", mdb, key, maxRecordSize)
	}
	if err := json.Unmarshal(data, &r.recordJSON); err != nil {
		return nil, fmt.Errorf("database %s: %s is not a gc record: %w", mdb, key, err)
	}
	if r.Format != recordFormat {
		return nil, fmt.Errorf("database %s: %s has format %q, want %q (written by a newer chunkd?)", mdb, key, r.Format, recordFormat)
	}
	for _, rv := range r.Collected {
		v, err := rv.version()
		if err != nil {
			return nil, fmt.Errorf("database %s: %s: collected version %q: %w", mdb, key, rv.Root, err)
		}
		r.byRoot[v.Root] = v
	}
	return r, nil
}

// addCollected records versions (newest first) as collected at time at,
// before those recorded already, keeping the newest maxRecorded.
func (r *record) addCollected(vs []Version, at time.Time) {
	var add []recordedVersion
	for _, v := range vs {
		if _, dup := r.byRoot[v.Root]; dup {
			continue
		}
		add = append(add, recordVersion(v, at))
		v.Collected = at
		r.byRoot[v.Root] = v
	}
	r.Collected = append(add, r.Collected...)
	if len(r.Collected) > maxRecorded {
		for _, rv := range r.Collected[maxRecorded:] {
			if a, err := addr.Parse(rv.Root); err == nil {
				delete(r.byRoot, a)
			}
		}
		r.Collected = slices.Clip(r.Collected[:maxRecorded])
	}
}

// save puts the record.
func (r *record) save(ctx context.Context, mdb *manifest.DB) error {
	data, err := json.Marshal(r.recordJSON)
	if err != nil {
		return err
	}
	if err := mdb.Store().Put(ctx, recordKey(mdb), data); err != nil {
		return fmt.Errorf("database %s: write %s: %w", mdb, recordKey(mdb), err)
	}
	return nil
}

// Collected returns the versions of database db in s that chunkd gc has
// collected, newest first (the newest 10,000), by root.
func Collected(ctx context.Context, s store.Store, db string) (map[addr.Addr]Version, error) {
	mdb, err := manifest.Open(ctx, s, db)
	if err != nil {
		return nil, err
	}
	r, err := loadRecord(ctx, mdb)
	if err != nil {
		return nil, err
	}
	return r.byRoot, nil
}

// History is Log with the versions chunkd gc collected: each version gc
// collected is marked (Version.Collected), whether it still reads or not,
// and the history goes on past a version that no longer reads as far as
// the record of collected versions goes. collected is Collected's map.
func History(ctx context.Context, c ChunkReader, collected map[addr.Addr]Version, from addr.Addr, limit int) ([]Version, error) {
	if from.IsEmpty() {
		h, err := Head(ctx, c)
		if err != nil {
			return nil, err
		}
		from = h
	}
	var out []Version
	seen := map[addr.Addr]bool{}
	for a := from; !a.IsEmpty() && (limit <= 0 || len(out) < limit); {
		if seen[a] {
			return out, fmt.Errorf("sqlchunks: log of database %q: version %s is its own ancestor", c.DB(), a)
		}
		seen[a] = true
		rec, wasCollected := collected[a]
		v, err := ReadVersion(ctx, c, a)
		switch {
		case err == nil && wasCollected:
			v.Collected = rec.Collected
		case err != nil && wasCollected:
			v = rec
		case err != nil:
			return out, err
		}
		out = append(out, v)
		a = v.Parent
	}
	return out, nil
}
