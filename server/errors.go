package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/chunkd/chunkd/store"
	"google.golang.org/grpc/codes"
)

// Kind says what went wrong, in the terms a client acts on. Each kind has
// one HTTP status and one gRPC code (kinds, below); an error reaches the
// APIs as an *Error carrying its kind, its message and its cause.
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
)

// kinds maps each kind to its HTTP status and gRPC code: the one place
// both APIs take them from.
var kinds = map[Kind]struct {
	http int
	grpc codes.Code
	name string
}{
	KindInternal:         {http.StatusInternalServerError, codes.Internal, "internal"},
	KindBadRequest:       {http.StatusBadRequest, codes.InvalidArgument, "bad request"},
	KindTooLarge:         {http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "too large"},
	KindUnknownDB:        {http.StatusNotFound, codes.NotFound, "unknown database"},
	KindUnknownChunk:     {http.StatusInternalServerError, codes.Internal, "unknown chunk"},
	KindCorrupt:          {http.StatusInternalServerError, codes.DataLoss, "corrupt"},
	KindStoreUnreachable: {http.StatusServiceUnavailable, codes.Unavailable, "store unreachable"},
	KindStoreDenied:      {http.StatusBadGateway, codes.Unavailable, "store denied access"},
	KindShuttingDown:     {http.StatusServiceUnavailable, codes.Unavailable, "shutting down"},
	KindCanceled:         {499, codes.Canceled, "canceled"}, // nginx's "client closed request"
	KindUnknownImage:     {http.StatusNotFound, codes.NotFound, "unknown image"},
	KindNotServed:        {http.StatusNotImplemented, codes.Unimplemented, "not served"},
	KindUnknownFile:      {http.StatusNotFound, codes.NotFound, "unknown file"},
}

func (k Kind) String() string { return kinds[k].name }

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

func errorf(k Kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// ErrStoreUnreachable matches (errors.Is) every error of kind
// KindStoreUnreachable.
var ErrStoreUnreachable = errors.New("object store unreachable")

// kindOf returns err's kind: its own, if it is an *Error, else what its
// cause says.
func kindOf(err error) Kind {
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

// statusOf returns the HTTP status for err.
func statusOf(err error) int { return kinds[kindOf(err)].http }

// codeOf returns the gRPC code for err.
func codeOf(err error) codes.Code { return kinds[kindOf(err)].grpc }

// storeErr classifies a store error met while doing what (the message):
// unreachable and denied stores keep their kinds; a missing object is a
// missing table file (what to do with a missing manifest is the caller's
// call, before it gets here).
func storeErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, context.Canceled):
		return errorf(KindCanceled, err, "%s", msg)
	case errors.Is(err, store.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return errorf(KindStoreUnreachable, err, "%s", msg)
	case errors.Is(err, store.ErrAccessDenied):
		return errorf(KindStoreDenied, err, "%s", msg)
	case errors.Is(err, store.ErrNotFound):
		return errorf(KindUnknownChunk, err, "%s: the file is missing from the store", msg)
	}
	return errorf(KindInternal, err, "%s", msg)
}

// StatusOf returns the HTTP status an error of the Cache maps to, for
// front ends outside this package (500 for errors it does not know).
func StatusOf(err error) int { return statusOf(err) }

// GRPCStatus returns the gRPC status an error of the Cache maps to, for
// front ends outside this package.
func GRPCStatus(err error) error { return toStatus(err) }
