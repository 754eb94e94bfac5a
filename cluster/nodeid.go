package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// NodeIDFile is the file in a node's cache directory that keeps its id
// when --node-id is not given.
const NodeIDFile = "node-id"

// NodeID returns the id kept in cacheDir's NodeIDFile, making one (random)
// the first time: a node keeps its id, and so its files, as long as it
// keeps its cache directory.
func NodeID(cacheDir string) (string, error) {
	path := filepath.Join(cacheDir, NodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("node id: %w", err)
	}
	var r [8]byte
	rand.Read(r[:])
	id := "node-" + hex.EncodeToString(r[:])
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return id, nil
}
