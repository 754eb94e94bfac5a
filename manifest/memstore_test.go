package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/storetest"
)

// memStore is a minimal in-memory store.Store for tests. Versions are
// content hashes, as for the folder backend.
type memStore struct {
	mu   sync.Mutex
	objs map[string]memObj
}

type memObj struct {
	data []byte
	mod  time.Time
}

func newMemStore() *memStore { return &memStore{objs: map[string]memObj{}} }

func (o memObj) info(key string) store.Info {
	return store.Info{Key: key, Size: int64(len(o.data)), ModTime: o.mod, Version: memVersion(o.data)}
}

func memVersion(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// begin checks the context and the key, as every method must.
func begin(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem %s: %w", key, err)
	}
	return store.CheckKey(key)
}

func (m *memStore) get(ctx context.Context, key string) (memObj, error) {
	if err := begin(ctx, key); err != nil {
		return memObj{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return memObj{}, fmt.Errorf("mem %s: %w", key, store.ErrNotFound)
	}
	return o, nil
}

func (m *memStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	o, err := m.get(ctx, key)
	if err != nil {
		return 0, err
	}
	data := o.data
	if off < 0 || off > int64(len(data)) {
		return 0, fmt.Errorf("mem %s: offset %d: %w", key, off, io.ErrUnexpectedEOF)
	}
	n := copy(p, data[off:])
	if n < len(p) {
		return n, fmt.Errorf("mem %s: %w", key, io.ErrUnexpectedEOF)
	}
	return n, nil
}

func (m *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	o, err := m.get(ctx, key)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(o.data), nil
}

func (m *memStore) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	o, err := m.get(ctx, key)
	if err != nil {
		return nil, store.Info{}, err
	}
	return io.NopCloser(bytes.NewReader(o.data)), o.info(key), nil
}

func (m *memStore) Put(ctx context.Context, key string, data []byte) error {
	if err := begin(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = memObj{bytes.Clone(data), time.Now()}
	return nil
}

func (m *memStore) Head(ctx context.Context, key string) (store.Info, error) {
	o, err := m.get(ctx, key)
	if err != nil {
		return store.Info{}, err
	}
	return o.info(key), nil
}

func (m *memStore) List(ctx context.Context, prefix string) ([]store.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mem list %q: %w", prefix, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Info
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, o.info(k))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *memStore) Delete(ctx context.Context, key string) error {
	if err := begin(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memStore) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	if err := begin(ctx, key); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.objs[key]
	switch {
	case ifVersion == "" && ok:
		return "", fmt.Errorf("mem %s exists: %w", key, store.ErrPrecondition)
	case ifVersion != "" && !ok:
		return "", fmt.Errorf("mem %s is gone: %w", key, store.ErrPrecondition)
	case ifVersion != "" && memVersion(cur.data) != ifVersion:
		return "", fmt.Errorf("mem %s is at %s, not %s: %w", key, memVersion(cur.data), ifVersion, store.ErrPrecondition)
	}
	m.objs[key] = memObj{bytes.Clone(data), time.Now()}
	return memVersion(data), nil
}

func (m *memStore) String() string { return "mem://test" }
func (m *memStore) Close() error   { return nil }

// hookStore runs a hook before each PutIf, to stage crashes and races
// between Update's sidecar and manifest writes.
type hookStore struct {
	store.Store
	beforePutIf func(key string) error
}

func (h *hookStore) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	if h.beforePutIf != nil {
		if err := h.beforePutIf(key); err != nil {
			return "", err
		}
	}
	return h.Store.PutIf(ctx, key, data, ifVersion)
}

var _ store.Store = (*memStore)(nil)

// The in-memory fake keeps the store contract, so tests against it mean
// something for real backends.
func TestMemStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newMemStore() })
}
