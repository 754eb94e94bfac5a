package server

import (
	"bytes"
	"encoding/json"
	"fmt"
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

func (c *Cache) statePath(db string) string {
	return filepath.Join(c.cfg.CacheDir, api.CacheDBsDir, url.PathEscape(db)+".json")
}

// saveState records d's current state, unless it is what was saved last.
// Failures are logged: the state only helps an offline restart.
func (c *Cache) saveState(d *database) {
	d.mu.RLock()
	st := dbState{Format: stateFormat, DB: d.name, Root: d.root.String()}
	for _, t := range d.tables {
		st.Tables = append(st.Tables, tableState{Name: t.name, Key: t.key, Size: t.size, Appendix: t.appendix.Load()})
	}
	d.mu.RUnlock()
	b, err := json.Marshal(st)
	if err != nil {
		c.log.Warn("encode database state", "db", d.name, "err", err)
		return
	}
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if bytes.Equal(b, d.saved) {
		return
	}
	path := c.statePath(d.name)
	tmp := filepath.Join(c.cfg.CacheDir, api.CacheTmpDir, "state-"+filepath.Base(path))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		c.log.Warn("save database state", "db", d.name, "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		c.log.Warn("save database state", "db", d.name, "err", err)
		return
	}
	d.saved = b
}

// loadOffline builds database name from its saved state and the files of
// it on disk, for when the store cannot be reached. Files not on disk are
// left out and counted in missing: a chunk not found then is "unknown",
// not absent. The database is marked stale, so the next miss tries the
// store again.
func (c *Cache) loadOffline(d *database) error {
	b, err := os.ReadFile(c.statePath(d.name))
	if err != nil {
		return err
	}
	var st dbState
	if err := json.Unmarshal(b, &st); err != nil || st.Format != stateFormat || st.DB != d.name {
		return fmt.Errorf("%s: not a saved state of database %q", c.statePath(d.name), d.name)
	}
	root, err := addr.Parse(st.Root)
	if err != nil {
		return fmt.Errorf("%s: %w", c.statePath(d.name), err)
	}
	var tables []*table
	byName := map[string]*table{}
	missing := 0
	for _, ts := range st.Tables {
		if cf := c.disk.get(ts.Key); cf == nil || cf.size != ts.Size {
			missing++ // its index is in the store only
			continue
		}
		t, err := c.newTable(d, ts.Name, ts.Key, ts.Size, ts.Appendix)
		if err != nil {
			return err
		}
		tables = append(tables, t)
		byName[t.name] = t
	}
	d.mu.Lock()
	d.root, d.tables, d.byName, d.missing = root, tables, byName, missing
	d.missingErr = fmt.Errorf("database %q: %d of its table files are not on disk and its manifest could not be read: %w", d.name, missing, ErrStoreUnreachable)
	d.loadedAt = time.Time{} // stale: the next miss reads the manifest
	d.mu.Unlock()
	d.saved = b
	return nil
}
