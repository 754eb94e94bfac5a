package server

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is an error with the HTTP status it maps to; gRPC maps the same
// statuses to its codes.
type Error struct {
	Code int // HTTP status
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

func errorf(code int, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

var (
	// ErrStoreUnreachable is returned for a miss when the object store
	// cannot be reached in time.
	ErrStoreUnreachable = errors.New("object store unreachable")
)

// statusOf returns the HTTP status for err.
func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, ErrStoreUnreachable) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
