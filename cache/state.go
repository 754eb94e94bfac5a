package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
)

// A database's state (its root, and each table file's store key, size and
// role) is saved under DIR/dbs/ whenever its manifest is loaded, so that a
// service restarted while the store is unreachable can still serve the
// files it has on disk: without it, the first request for a database
// needs the manifest and a HEAD per file from the store.

const stateFormat = "chunkd.dbstate.v1"

type dbState struct {
	Format string       `json:"format"`
	DB     string       `json:"db"`
	Root   string       `json:"root"`
	Tables []tableState `json:"tables"`
}

type tableState struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Size     int64  `json:"size"`
	Appendix bool   `json:"appendix,omitempty"`
}

func (d *database) statePath() string {
	return filepath.Join(d.env.cfg.CacheDir, api.CacheDBsDir, url.PathEscape(d.name)+".json")
}

// errNoState: the database has no saved state.
var errNoState = errors.New("no saved state")

// saveState records d's current state, unless it is what was saved last.
// Failures are logged: the state only helps an offline restart.
func (d *database) saveState() {
	log := d.env.log
	d.mu.RLock()
	st := dbState{Format: stateFormat, DB: d.name, Root: d.root.String()}
	for _, t := range d.tables {
		st.Tables = append(st.Tables, tableState{Name: t.name, Key: t.key, Size: t.size, Appendix: t.appendix.Load()})
	}
	d.mu.RUnlock()
	b, err := json.Marshal(st)
	if err != nil {
		log.Warn("encode database state", "db", d.name, "err", err)
		return
	}
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if bytes.Equal(b, d.saved) {
		return
	}
	path := d.statePath()
	tmp := filepath.Join(d.env.cfg.CacheDir, api.CacheTmpDir, "state-"+filepath.Base(path))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp) // a full file system leaves a part written
		log.Warn("save database state", "db", d.name, "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		log.Warn("save database state", "db", d.name, "err", err)
		return
	}
	d.saved = b
}

// loadSaved builds the database from its saved state and the files of it
// on disk, for a restart that need not wait on the store (and a store that
// cannot be asked). Files not on disk, or whose local copy fails its check,
// are left out and counted in missing: a chunk not found then is
// "unknown", not absent. loadedAt stays zero: the next miss reads the
// manifest.
func (d *database) loadSaved() error {
	path := d.statePath()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return errNoState
	}
	if err != nil {
		return err
	}
	var st dbState
	if err := json.Unmarshal(b, &st); err != nil || st.Format != stateFormat || st.DB != d.name {
		return fmt.Errorf("%s: not a saved state of database %q", path, d.name)
	}
	root, err := addr.Parse(st.Root)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var tables []*table
	byName := map[string]*table{}
	missing := 0
	for _, ts := range st.Tables {
		t := d.env.keys.cached(ts.Key, ts.Size, func() *table { return openCachedTable(d.env, d.name, ts.Name, ts.Key, ts.Size, ts.Appendix) })
		if t == nil {
			missing++ // its index is in the store only
			continue
		}
		tables = append(tables, t)
		byName[t.name] = t
	}
	missingErr := Errorf(KindStoreUnreachable, nil, "database %q: %d of its table files are not on disk and its manifest has not been read", d.name, missing)
	d.publish(root, tables, byName, missing, missingErr, time.Time{})
	d.stateMu.Lock()
	d.saved = b
	d.stateMu.Unlock()
	return nil
}
