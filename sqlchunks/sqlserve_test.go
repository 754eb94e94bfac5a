package sqlchunks_test

import (
	"log/slog"

	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/httpapi"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlserve"
)

// The internal tests' services serve open sets and page images as
// chunkd serve does (sqlchunks.ServeSQL).
func init() {
	sqlchunks.ServeSQL = func(c *cache.Cache, dir string, imageBytes int64) ([]httpapi.Route, func(), error) {
		s, err := sqlserve.New(sqlserve.Config{Cache: c, CacheDir: dir, ImageBytes: imageBytes, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, nil, err
		}
		return s.Routes(), func() { s.Close() }, nil
	}
}
