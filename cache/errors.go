package cache

import (
	"context"
	"errors"
	"fmt"
	"github.com/chunkd/chunkd/api"

	"github.com/chunkd/chunkd/store"
)

// Kind says what went wrong, in the terms a client acts on. Each
// transport gives each kind one status of its own (package httpapi an
// HTTP status, package grpcapi a gRPC code); an error reaches them as an
// *Error carrying its kind, its message and its cause.
type Kind int

const (
	// KindInternal: a fault of the service, or one it cannot classify.
	KindInternal Kind = iota
	// KindBadRequest: the request itself is malformed (a bad address, a
	// bad database name, a batch too large to decode).
	KindBadRequest
	// KindTooLarge: a batch over the limit.
	KindTooLarge
	// KindUnknownDB: no database of that name (no manifest in the store).
	KindUnknownDB
	// KindUnknownChunk: the database may hold the chunk but the service
	// cannot tell, because a file of it cannot be read (corrupt, or
	// missing from the store). Never "absent": a client must not take it
	// as a 404.
	KindUnknownChunk
	// KindCorrupt: the chunk's bytes failed their proof in every copy the
	// service could read (the object in the store is corrupt or forged).
	KindCorrupt
	// KindStoreUnreachable: the store did not answer in time.
	KindStoreUnreachable
	// KindStoreDenied: the store refused the service's credentials.
	KindStoreDenied
	// KindShuttingDown: the service is stopping.
	KindShuttingDown
	// KindCanceled: the client went away (or gave up) first.
	KindCanceled
	// KindUnknownImage: no page image of that name (evicted: register it
	// again).
	KindUnknownImage
	// KindNotServed: this service does not offer that API.
	KindNotServed
	// KindUnknownFile: the database has no table file of that name (its
	// manifest, read again, does not list it).
	KindUnknownFile
	// KindNoSuchVersion: the database has no version of that root (its
	// manifest, read again, names no file that holds the root chunk), or
	// the root is the all-zero address, which names no version.
	KindNoSuchVersion
	// KindVersionCollected: the database had that version, and garbage
	// collection (chunkd gc) removed it: never "absent", nor a fault.
	KindVersionCollected
)

// kindNames are the kinds' names, as errors and docs give them.
var kindNames = map[Kind]string{
	KindInternal:         "internal",
	KindBadRequest:       "bad request",
	KindTooLarge:         "too large",
	KindUnknownDB:        "unknown database",
	KindUnknownChunk:     "unknown chunk",
	KindCorrupt:          "corrupt",
	KindStoreUnreachable: "store unreachable",
	KindStoreDenied:      "store denied access",
	KindShuttingDown:     "shutting down",
	KindCanceled:         "canceled",
	KindUnknownImage:     "unknown image",
	KindNotServed:        "not served",
	KindUnknownFile:      "unknown file",
	KindNoSuchVersion:    api.KindNoSuchVersion,
	KindVersionCollected: api.KindVersionCollected,
}

// Kinds returns every kind, in order: what a transport maps to its
// statuses (each transport's table must cover them all).
func Kinds() []Kind {
	out := make([]Kind, 0, len(kindNames))
	for k := Kind(0); int(k) < len(kindNames); k++ {
		out = append(out, k)
	}
	return out
}

func (k Kind) String() string { return kindNames[k] }

// Error is a service error: its kind, a message naming what failed, and
// the cause (wrapped, so errors.Is finds the store's sentinels).
type Error struct {
	Kind Kind
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, ErrStoreUnreachable) match every error of that
// kind, whatever its cause.
func (e *Error) Is(target error) bool {
	return target == ErrStoreUnreachable && e.Kind == KindStoreUnreachable
}

// Errorf returns an *Error of kind k wrapping cause, its message
// formatted.
func Errorf(k Kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// ErrStoreUnreachable matches (errors.Is) every error of kind
// KindStoreUnreachable.
var ErrStoreUnreachable = errors.New("object store unreachable")

// KindOf returns err's kind: its own, if it is an *Error, else what its
// cause says.
func KindOf(err error) Kind {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Kind
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, store.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return KindStoreUnreachable
	case errors.Is(err, store.ErrAccessDenied):
		return KindStoreDenied
	}
	return KindInternal
}

// storeErr classifies a store error met while doing what (the message):
// unreachable and denied stores keep their kinds; a missing object is a
// missing table file (what to do with a missing manifest is the caller's
// call, before it gets here).
func storeErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, context.Canceled):
		return Errorf(KindCanceled, err, "%s", msg)
	case errors.Is(err, store.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return Errorf(KindStoreUnreachable, err, "%s", msg)
	case errors.Is(err, store.ErrAccessDenied):
		return Errorf(KindStoreDenied, err, "%s", msg)
	case errors.Is(err, store.ErrNotFound):
		return Errorf(KindUnknownChunk, err, "%s: the file is missing from the store", msg)
	}
	return Errorf(KindInternal, err, "%s", msg)
}
