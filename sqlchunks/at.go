package sqlchunks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chunkd/chunkd/addr"
)

// ErrNoVersion is wrapped by the errors for a version a database does not
// have: the all-zero root, or no version at or before a time.
var ErrNoVersion = errors.New("no such version")

// At names the version a reader asks for (chunkd sql --at, the
// extension's at=): the head (the zero At), a version's root, or the
// newest version made at or before a time.
type At struct {
	// Root, when IsRoot, is the version's root chunk (it may be the zero
	// address: a root no version has).
	Root addr.Addr
	// Time, when not zero and not IsRoot, asks for the newest version
	// made at or before it.
	Time time.Time
	// IsRoot says a root was given.
	IsRoot bool
}

// atTimeLayouts are the time forms ParseAt reads besides RFC 3339: a
// time of day without a zone or a date alone, both UTC.
var atTimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"}

// ParseAt reads a version as a user gives it: "" for the head, a root
// (32 characters of 0-9a-v, as chunkd log shows), or a time (RFC 3339,
// "2026-11-28T10:00:00Z"; without a zone, or a date alone, it is UTC).
func ParseAt(s string) (At, error) {
	if s == "" {
		return At{}, nil
	}
	if len(s) == addr.TextSize {
		a, err := addr.Parse(s)
		if err == nil {
			return At{Root: a, IsRoot: true}, nil
		}
	}
	for _, layout := range atTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return At{Time: t}, nil
		}
	}
	return At{}, fmt.Errorf("%q is neither a version's root (%d characters of 0-9 a-v, from chunkd log) nor a time such as 2026-11-28T10:00:00Z", s, addr.TextSize)
}

// IsHead reports whether at asks for the head.
func (at At) IsHead() bool { return !at.IsRoot && at.Time.IsZero() }

// String gives at as ParseAt reads it ("" for the head).
func (at At) String() string {
	switch {
	case at.IsRoot:
		return at.Root.String()
	case !at.Time.IsZero():
		return at.Time.Format(time.RFC3339)
	}
	return ""
}

// Resolve returns the root of the version at names in the database c
// reads, for OpenVersion: the zero address for the head (which
// OpenVersion opens in the fewest requests), the root given, or the newest
// version made at or before the time given, found by walking the history
// back from the head (a chunk read a version). The all-zero root, a time
// before the database's first version, or one before every version that
// can still be read (older ones collected), is an error wrapping
// ErrNoVersion that names what was asked for.
func Resolve(ctx context.Context, c ChunkReader, at At) (addr.Addr, error) {
	switch {
	case at.IsRoot && at.Root.IsEmpty():
		return addr.Addr{}, fmt.Errorf("sqlchunks: %w %s of database %q", ErrNoVersion, at.Root, c.DB())
	case at.IsRoot:
		return at.Root, nil
	case at.Time.IsZero():
		return addr.Addr{}, nil
	}
	head, err := Head(ctx, c)
	if err != nil {
		return addr.Addr{}, err
	}
	var oldest *Version
	for a := head; !a.IsEmpty(); {
		v, err := ReadVersion(ctx, c, a)
		if err != nil {
			if oldest == nil {
				return addr.Addr{}, err
			}
			return addr.Addr{}, fmt.Errorf("sqlchunks: %w at or before %s in database %q: the oldest version that reads is %s of %s, and its parent %s does not read (collected?): %w",
				ErrNoVersion, at, c.DB(), oldest.Root, oldest.Time.UTC().Format(time.RFC3339), a, err)
		}
		if !v.Time.After(at.Time) {
			return v.Root, nil
		}
		oldest = &v
		a = v.Parent
	}
	return addr.Addr{}, fmt.Errorf("sqlchunks: %w at or before %s in database %q: its first version, %s, was made at %s",
		ErrNoVersion, at, c.DB(), oldest.Root, oldest.Time.UTC().Format(time.RFC3339))
}
