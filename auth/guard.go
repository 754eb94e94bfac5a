package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
)

// Need is what a caller must show to call one route or method. Every
// route of the service's APIs carries its own (package httpapi's Route,
// package grpcapi's Service), so the guard knows no route of any feature.
// The zero Need is no rule at all: the APIs refuse to serve a route
// without one.
type Need int

const (
	needUnset Need = iota
	// Open: nothing (health checks).
	Open
	// AnyToken: any token the file holds.
	AnyToken
	// DBToken: a token that grants the database the request names (the
	// route's {db}, the request message's Db).
	DBToken
	// MetricsToken: any token, unless the guard serves metrics openly.
	MetricsToken
)

// Valid reports whether n is a rule (not the zero Need).
func (n Need) Valid() bool { return n >= Open && n <= MetricsToken }

func (n Need) String() string {
	switch n {
	case Open:
		return "open"
	case AnyToken:
		return "any token"
	case DBToken:
		return "a token for the database"
	case MetricsToken:
		return "a token for metrics"
	}
	return "no rule"
}

// Refusals, the same whatever was asked for, so that names cannot be
// probed: a token the file does not hold, and one that does not grant the
// database named (whether or not it exists).
var (
	ErrUnauthenticated = errors.New("missing or unknown bearer token (send Authorization: Bearer TOKEN)")
	ErrForbidden       = errors.New("the token does not grant this database")
)

// Guard decides who may call the service's APIs, by bearer tokens: a
// call without a token, or with one the file does not hold, is refused
// with ErrUnauthenticated (HTTP 401, gRPC Unauthenticated); one whose
// token does not grant the database it names with ErrForbidden (403,
// PermissionDenied). A nil *Guard lets every call through (the service
// runs without tokens).
type Guard struct {
	// Tokens are the tokens in force (reloadable).
	Tokens *File
	// MetricsOpen serves metrics (MetricsToken) without a token.
	MetricsOpen bool
	// Logger gets refusals at debug level. The token itself is never
	// logged.
	Logger *slog.Logger
}

// Check decides one call that needs n, presenting token, naming database
// db (for DBToken). It returns the token's grant (nil for a call that
// needs none), or a refusal; what (the route or method) and from (the
// caller's address) are for the log.
func (g *Guard) Check(n Need, token, db, what, from string) (*Grant, error) {
	if g == nil {
		return nil, nil
	}
	switch n {
	case Open:
		return nil, nil
	case MetricsToken:
		if g.MetricsOpen {
			return nil, nil
		}
	case AnyToken, DBToken:
	default:
		g.Logger.Error("no access rule: refused", "route", what)
		return nil, ErrForbidden
	}
	gr, ok := g.Tokens.Lookup(token)
	if !ok {
		g.Logger.Debug("refused: no known token", "route", what, "remote", from)
		return nil, ErrUnauthenticated
	}
	if n == DBToken && !gr.Allows(db) {
		g.Logger.Debug("refused: database not granted", "route", what, "db", db, "remote", from)
		return nil, ErrForbidden
	}
	return gr, nil
}

// BearerToken returns the token of an Authorization header: "Bearer
// TOKEN", or "Basic" credentials whose password is the token (how a Dolt
// client sends DOLT_REMOTE_PASSWORD with --user; the user name is
// ignored).
func BearerToken(h string) string {
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	if len(h) > 6 && strings.EqualFold(h[:6], "basic ") {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[6:])); err == nil {
			if _, pass, ok := strings.Cut(string(b), ":"); ok {
				return pass
			}
		}
	}
	return ""
}

// grantKey is the context key of a call's *Grant.
type grantKey struct{}

// NewContext returns ctx carrying the grant of its call's token.
func NewContext(ctx context.Context, g *Grant) context.Context {
	if g == nil {
		return ctx
	}
	return context.WithValue(ctx, grantKey{}, g)
}

// FromContext returns the grant of the call's token, or false when the
// service runs without tokens.
func FromContext(ctx context.Context) (*Grant, bool) {
	g, ok := ctx.Value(grantKey{}).(*Grant)
	return g, ok
}

// Granted keeps the names a call's grant allows (all of them without
// tokens): what a listing of databases shows the caller.
func Granted[T any](ctx context.Context, items []T, name func(T) string) []T {
	g, ok := FromContext(ctx)
	if !ok {
		return items
	}
	out := items[:0]
	for _, it := range items {
		if g.Allows(name(it)) {
			out = append(out, it)
		}
	}
	return out
}
