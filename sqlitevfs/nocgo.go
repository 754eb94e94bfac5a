//go:build !cgo

package sqlitevfs

import (
	"errors"
	"sync/atomic"
)

// Without cgo there is no SQLite to register with: the package compiles,
// and Register reports why it cannot work.
func registerVFS() error {
	return errors.New("sqlitevfs: needs cgo (build with CGO_ENABLED=1 and a C compiler)")
}

func tempOpens() int64 { return 0 }

// openedValue needs cgo, like every open.
func openedValue(uintptr) (any, error) { return nil, registerVFS() }

// PagesRead needs cgo, like every open.
func PagesRead(uintptr) int64 { return 0 }

// slotReader reads SlotFiles in C: without cgo, there is none.
type slotReader struct{}

func newSlotReader(Pages, *atomic.Int64) *slotReader { return nil }

func (*slotReader) release() {}

func (*slotReader) unregistered() {}
