package tablefile

import (
	"errors"
	"fmt"
)

var (
	// ErrNotTableFile: the bytes are not a table file or archive (bad magic,
	// a chunk journal, a truncated file).
	ErrNotTableFile = errors.New("not a table file")
	// ErrCorrupt: the file has the right shape but its contents disagree
	// with themselves: a bad CRC, a chunk that does not hash to its
	// address, an index that points outside the file.
	ErrCorrupt = errors.New("corrupt table file")
	// ErrNotFound: the table file holds no chunk with that address.
	ErrNotFound = errors.New("chunk not found")
)

// CorruptError names where a file is corrupt.
type CorruptError struct {
	Offset int64  // file offset of the bad record or section, -1 if unknown
	Addr   string // the chunk's address, if known
	Reason string
}

func (e *CorruptError) Error() string {
	s := "corrupt table file"
	if e.Addr != "" {
		s += ": chunk " + e.Addr
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", e.Offset)
	}
	return s + ": " + e.Reason
}

// Unwrap lets errors.Is(err, ErrCorrupt) succeed.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corruptf(off int64, a string, format string, args ...any) error {
	return &CorruptError{Offset: off, Addr: a, Reason: fmt.Sprintf(format, args...)}
}

func notTablef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotTableFile}, args...)...)
}
