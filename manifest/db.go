package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/store"
)

// Object names inside a database's key prefix.
const (
	// ManifestName is the manifest object, as Dolt names it.
	ManifestName = "manifest"
	// SidecarName is chunkd's sidecar object naming the appendix files
	// (see the package documentation).
	SidecarName = "manifest.chunkd"
	// SidecarFormat is the format (version) string of the sidecar JSON.
	SidecarFormat = "chunkd.appendix.v1"
	// ArchiveSuffix is appended to a table file's name when it is stored
	// as a Dolt archive.
	ArchiveSuffix = ".darc"
	// MaxNameLen is the longest database name ValidateName accepts.
	MaxNameLen = 128
)

// Size limits on what Load reads, far above anything real.
const (
	maxManifestSize = 64 << 20
	maxSidecarSize  = 16 << 20
)

// sidecar is the JSON form of SidecarName.
type sidecar struct {
	Format   string   `json:"format"`
	Manifest string   `json:"manifest"`
	Appendix []string `json:"appendix"`
}

// DB is a database in a store: the objects under one key prefix, a
// manifest and the table files it names. A DB holds no state besides its
// location, and its methods are safe for concurrent use.
type DB struct {
	s      store.Store
	name   string
	prefix string
}

// Open returns the database called name in s, whose objects live under the
// key prefix "name/". The name "" means the store's root is the database,
// as for a copied Dolt file:// remote; any other name must pass
// ValidateName. Open does no I/O, so the database need not exist yet (make
// it with Update from version ""); ctx is only checked for cancellation.
func Open(ctx context.Context, s store.Store, name string) (*DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("open database: nil store")
	}
	db := &DB{s: s, name: name}
	if name != "" {
		if err := ValidateName(name); err != nil {
			return nil, err
		}
		db.prefix = name + "/"
	}
	return db, nil
}

// Name returns the database's name ("" for the store root).
func (db *DB) Name() string { return db.name }

// Store returns the store the database lives in.
func (db *DB) Store() store.Store { return db.s }

// ManifestKey returns the key of the database's manifest object.
func (db *DB) ManifestKey() string { return db.prefix + ManifestName }

// SidecarKey returns the key of the database's sidecar object.
func (db *DB) SidecarKey() string { return db.prefix + SidecarName }

// String names the database for messages: `"name" in <store>`, or
// `at the root of <store>`.
func (db *DB) String() string {
	if db.name == "" {
		return "at the root of " + db.s.String()
	}
	return fmt.Sprintf("%q in %s", db.name, db.s.String())
}

// Load reads the manifest and returns it with the store's version of the
// manifest object, for a later Update. It also reads the sidecar and sets
// Appendix from it, if the sidecar describes exactly this manifest (else
// Appendix is nil; see the package documentation). A missing manifest gives
// an error wrapping store.ErrNotFound; a manifest that does not parse, one
// wrapping ErrCorrupt. A sidecar that is not valid JSON or has a format
// this version does not know is an error too.
func (db *DB) Load(ctx context.Context) (*Manifest, string, error) {
	for attempt := 0; ; attempt++ {
		// The two objects are read at once: on an object store each read
		// is a round trip, and the sidecar is checked against the
		// manifest below, so reading it early is safe.
		type sidecarResult struct {
			sc  *sidecar
			err error
		}
		scc := make(chan sidecarResult, 1)
		go func() {
			sc, err := db.readSidecar(ctx)
			scc <- sidecarResult{sc, err}
		}()
		data, version, err := db.readManifest(ctx)
		scr := <-scc
		if err != nil {
			return nil, "", err
		}
		m, err := Parse(data)
		if err != nil {
			return nil, "", fmt.Errorf("database %s: %s: %w", db, db.ManifestKey(), err)
		}
		sc, err := scr.sc, scr.err
		if err != nil {
			return nil, "", err
		}
		if sc == nil {
			return m, version, nil
		}
		if sc.Manifest == addr.Of(data).String() {
			for _, name := range sc.Appendix {
				if m.HasSpec(name) && !slices.Contains(m.Appendix, name) {
					m.Appendix = append(m.Appendix, name)
				}
			}
			return m, version, nil
		}
		// The sidecar describes another manifest: a stale one, or a newer
		// one whose manifest was written after we read ours. Look again if
		// the manifest has changed since; otherwise there is no appendix.
		if attempt >= 2 {
			return m, version, nil
		}
		info, err := db.s.Head(ctx, db.ManifestKey())
		if err != nil || info.Version == version {
			return m, version, nil
		}
	}
}

func (db *DB) readManifest(ctx context.Context) ([]byte, string, error) {
	key := db.ManifestKey()
	rc, info, err := db.s.Open(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		if db.name == "" {
			return nil, "", fmt.Errorf("no database at the root of %s (no %s object): %w", db.s, key, err)
		}
		return nil, "", fmt.Errorf("no database %q in %s (no %s object): %w", db.name, db.s, key, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("database %s: read %s: %w", db, key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("database %s: read %s: %w", db, key, err)
	}
	if len(data) > maxManifestSize {
		return nil, "", fmt.Errorf("database %s: %s is larger than %d bytes; not a manifest", db, key, maxManifestSize)
	}
	return data, info.Version, nil
}

// readSidecar returns the sidecar, or nil if there is none.
func (db *DB) readSidecar(ctx context.Context) (*sidecar, error) {
	key := db.SidecarKey()
	data, err := db.s.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("database %s: read %s: %w", db, key, err)
	}
	if len(data) > maxSidecarSize {
		return nil, fmt.Errorf("database %s: %s is larger than %d bytes; not a chunkd sidecar", db, key, maxSidecarSize)
	}
	var sc sidecar
	if err := json.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("database %s: %s is not valid sidecar JSON: %w", db, key, err)
	}
	if sc.Format != SidecarFormat {
		return nil, fmt.Errorf("database %s: %s has format %q, want %q (written by a newer chunkd?)", db, key, clip(sc.Format), SidecarFormat)
	}
	return &sc, nil
}

// Update replaces the manifest with m if the manifest object is still at
// version old (as returned by Load or a previous Update), or creates it if
// old is "" and there is no manifest yet. It returns the new version. If
// another writer changed the manifest first, the manifest is left as that
// writer made it and Update returns an error wrapping
// store.ErrPrecondition; Load again, redo the change and retry. m must
// pass Validate.
//
// Write order: first a check that the manifest is still at old (so an
// updater that is already out of date writes nothing), then the sidecar
// (written when m has an appendix, deleted when it has none), then the
// manifest, conditionally. The manifest write is the commit point:
// afterwards readers see m, and its sidecar, which is already in place.
// Because a sidecar names the exact manifest bytes it describes and Load
// ignores one that names other bytes, every failure between or during the
// writes - a crash, a race lost after the check, a concurrent writer
// overwriting the sidecar - can only make readers see no appendix for the
// current manifest (a slower download), never an appendix file the
// manifest does not list, and never a manifest that is not exactly one
// writer's. The next successful Update repairs the sidecar.
func (db *DB) Update(ctx context.Context, old string, m *Manifest) (string, error) {
	if m == nil {
		return "", fmt.Errorf("update database %s: nil manifest", db)
	}
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("update database %s: %w", db, err)
	}
	if err := db.checkVersion(ctx, old); err != nil {
		return "", err
	}
	data := m.Marshal()
	var sc []byte
	if len(m.Appendix) > 0 {
		var err error
		sc, err = json.Marshal(sidecar{
			Format:   SidecarFormat,
			Manifest: addr.Of(data).String(),
			Appendix: m.Appendix,
		})
		if err != nil {
			return "", fmt.Errorf("update database %s: encode sidecar: %w", db, err)
		}
		if err := db.s.Put(ctx, db.SidecarKey(), sc); err != nil {
			return "", fmt.Errorf("update database %s: write %s: %w", db, db.SidecarKey(), err)
		}
	} else if err := db.s.Delete(ctx, db.SidecarKey()); err != nil {
		return "", fmt.Errorf("update database %s: delete %s: %w", db, db.SidecarKey(), err)
	}
	version, err := db.s.PutIf(ctx, db.ManifestKey(), data, old)
	if errors.Is(err, store.ErrPrecondition) {
		return "", db.lost(old, err)
	}
	if err != nil {
		return "", fmt.Errorf("update database %s: write %s: %w", db, db.ManifestKey(), err)
	}
	if len(m.Appendix) > 0 {
		db.repairSidecar(ctx, data, version, sc)
	}
	return version, nil
}

// repairSidecar puts the sidecar sc of the manifest just written (data,
// at version) again if a writer that lost the race to it wrote its own
// sidecar meanwhile (they write theirs before their conditional write
// fails), and the manifest is still this one. It narrows the window in
// which readers of a current manifest see no appendix; it cannot close
// it (no store offers a write conditional on another object), so a
// failure here is not the update's.
func (db *DB) repairSidecar(ctx context.Context, data []byte, version string, sc []byte) {
	cur, err := db.readSidecar(ctx)
	if err != nil || (cur != nil && cur.Manifest == addr.Of(data).String()) {
		return
	}
	if info, err := db.s.Head(ctx, db.ManifestKey()); err != nil || info.Version != version {
		return
	}
	db.s.Put(ctx, db.SidecarKey(), sc)
}

// UpdateBytes returns how many bytes Update puts for m: the manifest and,
// when m has an appendix, the sidecar.
func UpdateBytes(m *Manifest) int64 {
	data := m.Marshal()
	n := int64(len(data))
	if len(m.Appendix) > 0 {
		sc, _ := json.Marshal(sidecar{Format: SidecarFormat, Manifest: addr.Of(data).String(), Appendix: m.Appendix})
		n += int64(len(sc))
	}
	return n
}

// checkVersion returns an error wrapping store.ErrPrecondition if the
// manifest is not at version old ("": absent).
func (db *DB) checkVersion(ctx context.Context, old string) error {
	info, err := db.s.Head(ctx, db.ManifestKey())
	switch {
	case errors.Is(err, store.ErrNotFound):
		if old != "" {
			return db.lost(old, fmt.Errorf("the manifest is gone: %w", store.ErrPrecondition))
		}
		return nil
	case err != nil:
		return fmt.Errorf("update database %s: read %s: %w", db, db.ManifestKey(), err)
	case old == "":
		return db.lost(old, store.ErrPrecondition)
	case info.Version != old:
		return db.lost(old, fmt.Errorf("now at version %q: %w", info.Version, store.ErrPrecondition))
	}
	return nil
}

// lost describes a lost conditional update; err wraps store.ErrPrecondition.
func (db *DB) lost(old string, err error) error {
	if old == "" {
		return fmt.Errorf("create database %s: a manifest already exists: %w", db, err)
	}
	return fmt.Errorf("update database %s: the manifest changed since version %q (another writer won): %w", db, old, err)
}

// TableKey returns the object key of a table file stored under its plain
// name. Dolt stores archives under "<name>.darc" instead; ResolveTable
// finds out which. The name must be an address's text form (as in a
// Spec), which also keeps it from reaching outside the database.
func (db *DB) TableKey(name string) (string, error) {
	if reason := checkAddrText(name); reason != "" {
		return "", fmt.Errorf("table file name %q: %s", clip(name), reason)
	}
	return db.prefix + name, nil
}

// ResolveTable finds a table file's object the way Dolt does, trying
// "<name>" and then "<name>.darc", and returns its key and size. If
// neither exists the error wraps store.ErrNotFound. The chunk journal
// (IsJournal) resolves like any file, though it is not a table file;
// callers that want table files only must check.
func (db *DB) ResolveTable(ctx context.Context, name string) (string, int64, error) {
	key, size, _, err := db.ResolveTableTail(ctx, name, nil)
	return key, size, err
}

// ResolveTableTail is ResolveTable that also reads the object's last
// len(tail) bytes (all of it, if it is shorter) into tail, in the same
// request where the store can (store.ReadTail): a table file's index is
// at its end. n is how many bytes it read.
func (db *DB) ResolveTableTail(ctx context.Context, name string, tail []byte) (key string, size int64, n int, err error) {
	base, err := db.TableKey(name)
	if err != nil {
		return "", 0, 0, err
	}
	for _, k := range []string{base, base + ArchiveSuffix} {
		if tail == nil {
			var info store.Info
			info, err = db.s.Head(ctx, k)
			size = info.Size
		} else {
			n, size, err = store.ReadTail(ctx, db.s, k, tail)
		}
		if err == nil {
			return k, size, n, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", 0, 0, fmt.Errorf("table file %s of database %s: %w", name, db, err)
		}
	}
	return "", 0, 0, fmt.Errorf("table file %s of database %s: neither %s nor %s%s exists: %w",
		name, db, base, base, ArchiveSuffix, store.ErrNotFound)
}

// ListDBs returns the names of the databases in s: every key prefix that
// holds a manifest object, sorted, with "" for a database at the store's
// root. Prefixes that are not valid names (ValidateName) are skipped. A
// copied local Dolt store lists its old generation ("oldgen") as a
// database of its own, which it is, in format.
func ListDBs(ctx context.Context, s store.Store) ([]string, error) {
	infos, err := s.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list databases in %s: %w", s, err)
	}
	var names []string
	for _, info := range infos {
		switch {
		case info.Key == ManifestName:
			names = append(names, "")
		case strings.HasSuffix(info.Key, "/"+ManifestName):
			name := strings.TrimSuffix(info.Key, "/"+ManifestName)
			if ValidateName(name) == nil {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// ValidateName checks a database name: at most MaxNameLen bytes of
// non-empty, slash-separated segments made of A-Z a-z 0-9 . _ -, with no
// ".." anywhere and no segment ".", so it cannot climb out of its key
// prefix. The empty name, which Open accepts for the store root, is
// rejected here.
func ValidateName(name string) error {
	const rule = "a database name is slash-separated segments of A-Z a-z 0-9 . _ -"
	switch {
	case name == "":
		return errors.New("database name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("database name %q is %d bytes long, over the limit of %d", clip(name), len(name), MaxNameLen)
	case strings.Contains(name, ".."):
		return fmt.Errorf("database name %q contains \"..\", which is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return fmt.Errorf("database name %q: character %q at position %d is not allowed (%s)", name, c, i, rule)
		}
	}
	for i, rest := 1, name; ; i++ { // each segment (strings.Split would allocate: this runs on every request)
		seg, after, more := strings.Cut(rest, "/")
		switch seg {
		case "":
			return fmt.Errorf("database name %q: segment %d is empty (leading, trailing or doubled slash; %s)", name, i, rule)
		case ".":
			return fmt.Errorf("database name %q: segment %d is \".\", which is not allowed", name, i)
		}
		if !more {
			return nil
		}
		rest = after
	}
}
