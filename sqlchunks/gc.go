package sqlchunks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/tablefile"
	"github.com/chunkd/chunkd/tableset"
)

// DefaultGrace is CollectOptions.Grace's default.
const DefaultGrace = time.Hour

// CollectOptions configure Collect.
type CollectOptions struct {
	// DB is the database's name in the store.
	DB string
	// Keep is how many versions, newest first along the history from the
	// head, are retained (at least 1: the head always is).
	Keep int
	// KeepFor, if positive, also retains every version made within it of
	// now (and the versions between them and the head).
	KeepFor time.Duration
	// Grace is how long a table file the manifest does not name is kept
	// after it was written and after gc first found it unnamed: an import
	// or a publish in flight has written files it has not named yet, and a
	// reader that loaded an older manifest may still read a file dropped
	// from the newer one. Zero means DefaultGrace; a negative Grace means
	// none (a file unnamed is deleted at once: tests, or a store nothing
	// else writes or reads).
	Grace time.Duration
	// DryRun finds what would be collected and deleted, and changes
	// nothing.
	DryRun bool
	// Step, if set, is called before each change gc makes to the store
	// (a table file put, the gc record's put, the manifest's write, each
	// delete), with what it is about to do: for logs, and for tests that
	// crash gc at each point.
	Step func(step string)

	now func() time.Time // for tests
}

// CollectResult describes a Collect.
type CollectResult struct {
	// Head is the database's head when gc read it last.
	Head addr.Addr
	// Retained are the versions kept, newest first; Collected the
	// versions this run found beyond them (the newest maxRecorded of them,
	// which the gc record lists).
	Retained, Collected []Version
	// Dropped are the table files the manifest no longer names: no
	// retained version needs a chunk only they hold. Repacked are files
	// of which retained versions needed under half: their needed chunks
	// went into NewFile, and the manifest names it instead.
	Dropped, Repacked []string
	NewFile           string
	NewFileBytes      int64
	// Deleted are the objects deleted (table files unnamed for the grace
	// period), DeletedBytes their size; Waiting counts the unnamed files
	// kept for the grace period.
	Deleted      []string
	DeletedBytes int64
	Waiting      int
	// TableBytes is the size of the table files the manifest names
	// before and after.
	TableBytesBefore, TableBytesAfter int64
	// Elapsed is how long it took.
	Elapsed time.Duration
}

// ErrDolt is wrapped by Collect's error for a database written by Dolt.
var ErrDolt = errors.New("written by Dolt")

// Collect deletes the table files of a chunkd SQLite database that no
// retained version needs (chunkd gc).
//
// The versions retained are the newest o.Keep along the history from the
// head, and those made within o.KeepFor. Every chunk of a retained version
// (root, page map, pages) is needed. The manifest's files are taken in
// order of preference - appendix files first, then the others newest
// first - and a file is kept while it holds a needed chunk no file taken
// before holds; a kept plain file of which that is under half its bytes
// is repacked (those chunks are copied into one new file). The manifest
// is then replaced, with the same root, naming only the kept and new
// files, by a conditional write: an import or publish that commits first
// makes gc read the head again and start over, and one that commits after
// finds its manifest changed and retries on top of gc's (putting again
// any chunk of its version that gc's manifest no longer names). Versions
// beyond the retained ones are recorded as collected (the gc record, see
// RecordName) before that write.
//
// Then the table files of the database that the manifest (read again)
// does not name are deleted, once they were written, and found unnamed by
// gc, longer than o.Grace ago. A crash at any point leaves every retained
// version readable: a file is deleted only when the manifest no longer
// names it, and the manifest names only files whose objects exist; a run
// after the crash finishes the work.
//
// A database written by Dolt (storage format __DOLT__) is refused with an
// error wrapping ErrDolt: Dolt collects its own garbage.
func Collect(ctx context.Context, s store.Store, o CollectOptions) (*CollectResult, error) {
	start := time.Now()
	res, err := collect(ctx, s, &o)
	if err != nil {
		return res, fmt.Errorf("sqlchunks: gc %s: %w", o.DB, err)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func (o *CollectOptions) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

func (o *CollectOptions) step(format string, args ...any) {
	if o.Step != nil {
		o.Step(fmt.Sprintf(format, args...))
	}
}

func (o *CollectOptions) grace() time.Duration {
	switch {
	case o.Grace == 0:
		return DefaultGrace
	case o.Grace < 0:
		return 0
	}
	return o.Grace
}

func collect(ctx context.Context, s store.Store, o *CollectOptions) (*CollectResult, error) {
	if s == nil {
		return nil, errors.New("no store")
	}
	if o.Keep < 1 {
		return nil, fmt.Errorf("keep %d versions: want at least 1 (the head)", o.Keep)
	}
	mdb, err := manifest.Open(ctx, s, o.DB)
	if err != nil {
		return nil, err
	}
	if o.DB == "" {
		return nil, errors.New("no database name")
	}
	if err := checkCollectable(ctx, mdb); err != nil {
		return nil, err
	}
	res := &CollectResult{}
	var h *head
	for attempt := 1; ; attempt++ {
		prev := h
		if h, err = loadHead(ctx, mdb, prev); err != nil {
			return res, err
		}
		if h.m == nil {
			return res, fmt.Errorf("no database %s", mdb)
		}
		h.adoptAppendix(prev)
		err := o.collectOnce(ctx, mdb, h, res)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrPrecondition) || attempt == importAttempts {
			return res, err
		}
		sleep(ctx, time.Duration(attempt)*20*time.Millisecond)
	}
	if err := o.deleteUnnamed(ctx, mdb, res); err != nil {
		return res, err
	}
	return res, nil
}

// checkCollectable refuses a database that is not chunkd's to collect.
func checkCollectable(ctx context.Context, mdb *manifest.DB) error {
	m, _, err := mdb.Load(ctx)
	if err != nil {
		return err
	}
	switch m.NBF {
	case manifest.FormatChunkdSQLite:
		return nil
	case manifest.FormatDolt:
		return fmt.Errorf("database %s is %w (storage format %s): Dolt collects its own garbage (dolt gc); chunkd gc collects only chunkd SQLite databases, and leaves this one alone", mdb, ErrDolt, m.NBF)
	}
	return fmt.Errorf("database %s has storage format %q, not %q: it is not a chunkd SQLite database, and chunkd gc leaves it alone", mdb, m.NBF, manifest.FormatChunkdSQLite)
}

// collectOnce finds the retained versions of head h and the files they
// need, and replaces the manifest with one that names only those (an
// error wrapping store.ErrPrecondition if another writer changed it).
func (o *CollectOptions) collectOnce(ctx context.Context, mdb *manifest.DB, h *head, res *CollectResult) error {
	rc := storeChunks{mdb, h.set}
	now := o.clock()
	rec, err := loadRecord(ctx, mdb)
	if err != nil {
		return err
	}
	*res = CollectResult{Head: h.m.Root}
	if res.Retained, res.Collected, err = o.walk(ctx, rc, h.m.Root, rec, now); err != nil {
		return err
	}
	need := make(map[addr.Addr]bool)
	for _, v := range res.Retained {
		vc, err := readVersionChunks(ctx, rc, v.Root)
		if err != nil {
			return fmt.Errorf("version %s, which gc retains, does not read (nothing was changed): %w", v.Root, err)
		}
		need[vc.root] = true
		for _, mc := range vc.maps {
			need[mc.addr] = true
		}
		for _, a := range vc.pages {
			need[a] = true
		}
	}
	plan := planFiles(h, need)
	if plan.missing > 0 {
		return fmt.Errorf("retained versions need %d chunks that no table file of the database holds, the first %s (nothing was changed)", plan.missing, plan.firstMissing)
	}
	for _, f := range h.files() {
		res.TableBytesBefore += f.Size
	}
	for _, f := range plan.drop {
		res.Dropped = append(res.Dropped, f.Name)
	}
	for _, f := range plan.repack {
		res.Repacked = append(res.Repacked, f.Name)
	}
	res.TableBytesAfter = res.TableBytesBefore
	for _, f := range append(slices.Clone(plan.drop), plan.repack...) {
		res.TableBytesAfter -= f.Size
	}
	if o.DryRun || (len(plan.drop) == 0 && len(plan.repack) == 0 && len(res.Collected) == 0) {
		return nil
	}
	var newSpec *manifest.Spec
	if len(plan.repack) > 0 {
		spec, size, err := o.repack(ctx, mdb, h, plan.repackChunks)
		if err != nil {
			return err
		}
		newSpec = &spec
		res.NewFile, res.NewFileBytes = spec.Name, size
		res.TableBytesAfter += size
	}
	if len(res.Collected) > 0 {
		rec.addCollected(res.Collected, now)
		o.step("put the gc record: %d versions collected", len(res.Collected))
		if err := rec.save(ctx, mdb); err != nil {
			return err
		}
	}
	if len(plan.drop) == 0 && len(plan.repack) == 0 {
		return nil
	}
	gone := map[string]bool{}
	for _, f := range append(slices.Clone(plan.drop), plan.repack...) {
		gone[f.Name] = true
	}
	m := &manifest.Manifest{Version: manifest.Version5, NBF: h.m.NBF, GCGen: h.m.GCGen, Root: h.m.Root}
	for _, sp := range h.m.Specs {
		if !gone[sp.Name] {
			m.Specs = append(m.Specs, sp)
		}
	}
	for _, name := range h.m.Appendix {
		if !gone[name] {
			m.Appendix = append(m.Appendix, name)
		}
	}
	if newSpec != nil {
		m.Specs = append(m.Specs, *newSpec)
	}
	if err := m.Relock(); err != nil {
		return err
	}
	o.step("write the manifest: %d table files dropped, %d repacked", len(plan.drop), len(plan.repack))
	if _, err := mdb.Update(ctx, h.version, m); err != nil {
		return err
	}
	return nil
}

// walk returns the versions of the history from head that o retains, and
// those beyond them that gc collects now: as far back as their roots read
// and the gc record does not list them, at most maxRecorded.
func (o *CollectOptions) walk(ctx context.Context, c ChunkReader, head addr.Addr, rec *record, now time.Time) (retained, collected []Version, err error) {
	a := head
	for !a.IsEmpty() {
		v, err := ReadVersion(ctx, c, a)
		if err != nil {
			if len(retained) == 0 {
				return nil, nil, fmt.Errorf("the head does not read (nothing was changed): %w", err)
			}
			// Collected before, or lost: nothing older is retained.
			return retained, nil, nil
		}
		if len(retained) >= o.Keep && (o.KeepFor <= 0 || now.Sub(v.Time) > o.KeepFor) {
			break
		}
		retained = append(retained, v)
		a = v.Parent
	}
	for !a.IsEmpty() && len(collected) < maxRecorded {
		if _, done := rec.byRoot[a]; done {
			break
		}
		v, err := ReadVersion(ctx, c, a)
		if err != nil {
			break
		}
		collected = append(collected, v)
		a = v.Parent
	}
	return retained, collected, nil
}

// filePlan is what gc does with a database's files.
type filePlan struct {
	drop, repack []*tableset.File[struct{}]
	repackChunks []addr.Addr // the needed chunks of the repacked files
	missing      int
	firstMissing addr.Addr
}

// planFiles decides which of h's files the needed chunks keep: appendix
// files first, then the others newest first (the manifest lists them in
// the order they came), each kept while it holds a needed chunk that no
// file before it does; a plain file of which that is under half its bytes
// is repacked.
func planFiles(h *head, need map[addr.Addr]bool) filePlan {
	var order []*tableset.File[struct{}]
	for _, f := range h.files() {
		if f.Appendix {
			order = append(order, f)
		}
	}
	byName := map[string]*tableset.File[struct{}]{}
	for _, f := range h.files() {
		byName[f.Name] = f
	}
	for i := len(h.m.Specs) - 1; i >= 0; i-- {
		if f := byName[h.m.Specs[i].Name]; f != nil && !f.Appendix {
			order = append(order, f)
		}
	}
	var p filePlan
	covered := make(map[addr.Addr]bool, len(need))
	for _, f := range order {
		var newly []addr.Addr
		var newlyBytes, allBytes int64
		for _, e := range f.Index.Entries() {
			allBytes += int64(e.Length)
			if need[e.Addr] && !covered[e.Addr] {
				newly = append(newly, e.Addr)
				newlyBytes += int64(e.Length)
			}
		}
		switch {
		case len(newly) == 0:
			p.drop = append(p.drop, f)
			continue
		case !f.Appendix && newlyBytes*2 < allBytes:
			p.repack = append(p.repack, f)
			p.repackChunks = append(p.repackChunks, newly...)
		}
		for _, a := range newly {
			covered[a] = true
		}
	}
	for a := range need {
		if !covered[a] {
			if p.missing == 0 || bytes.Compare(a[:], p.firstMissing[:]) < 0 {
				p.firstMissing = a
			}
			p.missing++
		}
	}
	return p
}

// repack copies chunks (from h's files) into a new table file and puts it.
func (o *CollectOptions) repack(ctx context.Context, mdb *manifest.DB, h *head, chunks []addr.Addr) (manifest.Spec, int64, error) {
	var buf bytes.Buffer
	w := tablefile.NewWriter(&buf)
	got := make([][]byte, len(chunks))
	if err := readFiles(ctx, h.set, chunks, func(i int, data []byte) error {
		got[i] = data
		return nil
	}); err != nil {
		return manifest.Spec{}, 0, fmt.Errorf("repack: %w", err)
	}
	for i, data := range got {
		if err := w.AddWithAddr(chunks[i], data); err != nil {
			return manifest.Spec{}, 0, err
		}
	}
	name, err := w.Finish()
	if err != nil {
		return manifest.Spec{}, 0, err
	}
	o.step("put table file %s: %d chunks repacked", name, w.Count())
	if err := putTable(ctx, mdb, name, buf.Bytes()); err != nil {
		return manifest.Spec{}, 0, err
	}
	return manifest.Spec{Name: name, Chunks: uint32(w.Count())}, int64(buf.Len()), nil
}

// deleteUnnamed deletes the database's table files that its manifest
// does not name, once written and found unnamed longer than the grace
// period ago, and notes the others in the gc record.
func (o *CollectOptions) deleteUnnamed(ctx context.Context, mdb *manifest.DB, res *CollectResult) error {
	m, _, err := mdb.Load(ctx)
	if err != nil {
		return err
	}
	rec, err := loadRecord(ctx, mdb)
	if err != nil {
		return err
	}
	infos, err := mdb.Store().List(ctx, mdb.Name()+"/")
	if err != nil {
		return fmt.Errorf("list database %s: %w", mdb, err)
	}
	now, grace := o.clock(), o.grace()
	unnamed := map[string]int64{}
	changed := false
	var del []store.Info
	for _, info := range infos {
		name, ok := tableName(mdb, info.Key)
		if !ok || m.HasSpec(name) {
			continue
		}
		first, seen := rec.Unnamed[info.Key]
		if !seen {
			first, changed = now.Unix(), true
		}
		unnamed[info.Key] = first
		if now.Sub(info.ModTime) >= grace && now.Sub(time.Unix(first, 0)) >= grace {
			del = append(del, info)
		} else {
			res.Waiting++
		}
	}
	if len(unnamed) != len(rec.Unnamed) {
		changed = true
	}
	if o.DryRun {
		for _, info := range del {
			res.Deleted = append(res.Deleted, info.Key)
			res.DeletedBytes += info.Size
		}
		return nil
	}
	rec.Unnamed = unnamed
	if changed {
		o.step("put the gc record: %d table files unnamed", len(unnamed))
		if err := rec.save(ctx, mdb); err != nil {
			return err
		}
	}
	for _, info := range del {
		o.step("delete %s", info.Key)
		if err := mdb.Store().Delete(ctx, info.Key); err != nil {
			return fmt.Errorf("delete %s: %w", info.Key, err)
		}
		res.Deleted = append(res.Deleted, info.Key)
		res.DeletedBytes += info.Size
		delete(rec.Unnamed, info.Key)
	}
	if len(del) > 0 {
		o.step("put the gc record: %d table files deleted", len(del))
		return rec.save(ctx, mdb)
	}
	return nil
}

// tableName returns the table file name of key if key is a table file
// directly in mdb's prefix ("<name>" or "<name>.darc"): not the manifest,
// its sidecar, the gc record, nor anything of a database nested below.
func tableName(mdb *manifest.DB, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, mdb.Name()+"/")
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	rest = strings.TrimSuffix(rest, manifest.ArchiveSuffix)
	if _, err := mdb.TableKey(rest); err != nil || manifest.IsJournal(rest) {
		return "", false
	}
	return rest, true
}
