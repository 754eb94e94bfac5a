//go:build !cgo

package sqlchunks

import (
	"context"
	"errors"
)

// Without cgo there is no SQLite to take a snapshot with.
func snapshot(context.Context, string, string, int) error {
	return errors.New("needs cgo (build with CGO_ENABLED=1 and a C compiler)")
}
