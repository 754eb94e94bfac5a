//go:build !cgo || chunkd_ext

package sqlquery

import (
	"context"
	"errors"
)

// errNoCgo is every call's error without cgo: there is no SQLite.
var errNoCgo = errors.New("sqlquery: needs cgo (build with CGO_ENABLED=1 and a C compiler)")

// Conn needs cgo.
type Conn struct{}

// Open needs cgo.
func Open(string, Options) (*Conn, error) { return nil, errNoCgo }

func (c *Conn) Close() error                              { return nil }
func (c *Conn) Interrupt()                                {}
func (c *Conn) InterruptOn(context.Context) (stop func()) { return func() {} }
func (c *Conn) Prepare(string) (*Stmt, error)             { return nil, errNoCgo }

// Stmt needs cgo.
type Stmt struct{}

func (s *Stmt) Columns() []Column     { return nil }
func (s *Stmt) Deterministic() bool   { return false }
func (s *Stmt) Params() []string      { return nil }
func (s *Stmt) Bind(int, Value) error { return errNoCgo }
func (s *Stmt) Step() (bool, error)   { return false, errNoCgo }
func (s *Stmt) Row() []Value          { return nil }
func (s *Stmt) Close() error          { return nil }
