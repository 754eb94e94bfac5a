// Package auth decides who may call the cache service: it reads the
// bearer-token files of "chunkd serve --auth-tokens" and answers which
// databases a token may read (tokens.go), checks a call against the rule
// its route or method carries (guard.go: the transports and features own
// their routes and rules; the guard names none), and loads the service's
// TLS certificate files (tls.go).
//
// A token file has one token per line, followed by the databases it may
// read, separated by spaces or tabs: database names, or glob patterns in
// the syntax of path.Match ("sales-*", "db-[0-9]", "*" for every
// database). A '#' starts a comment that runs to the end of the line, and
// blank lines are skipped:
//
//	# token                             databases
//	7f3a9c2e4b1d8f6a0e5c3b9d2a7f4e1c   sales-* inventory
//	b2e8d4f1a6c9e3b7d0f5a2c8e4b1d7f3   *
//
// Tokens are never compared byte by byte: the set keeps each token's
// SHA-256 digest, and a lookup hashes the token presented and finds its
// digest in a map. The time a lookup takes depends only on the digest of
// what was presented, which says nothing about how much of any stored
// token it shares, so timing cannot guess a token byte by byte (that is
// what a constant-time comparison guards against); and a lookup costs
// the same with ten tokens as with thousands (a scan of every digest with
// subtle.ConstantTimeCompare took 110 µs per request with 1000 tokens;
// BenchmarkLookup). The package never puts a token in an error or a log
// message; errors name the file and the line.
package auth

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync/atomic"
)

// Grant is what one token may read.
type Grant struct {
	patterns []string
}

// Allows reports whether the grant covers database db.
func (g *Grant) Allows(db string) bool {
	for _, p := range g.patterns {
		if ok, _ := path.Match(p, db); ok {
			return true
		}
	}
	return false
}

// Patterns returns the grant's database names and patterns, as written.
func (g *Grant) Patterns() []string { return append([]string(nil), g.patterns...) }

// Set is the tokens of one token file. It is immutable and safe for
// concurrent use.
type Set struct {
	bySum map[[sha256.Size]byte]*Grant
}

// Parse reads a token file from r; name is the file's name, for errors.
func Parse(r io.Reader, name string) (*Set, error) {
	s := &Set{bySum: map[[sha256.Size]byte]*Grant{}}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) == 1 {
			return nil, fmt.Errorf("%s:%d: a token without databases (write the databases it may read after it, or * for all)", name, line)
		}
		for _, p := range fields[1:] {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("%s:%d: bad database pattern %q: %v", name, line, p, err)
			}
		}
		sum := sha256.Sum256([]byte(fields[0]))
		if first, dup := seen[sum]; dup {
			return nil, fmt.Errorf("%s:%d: the token of line %d again (give each token one line)", name, line, first)
		}
		seen[sum] = line
		s.bySum[sum] = &Grant{patterns: fields[1:]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// Len returns how many tokens the set holds.
func (s *Set) Len() int { return len(s.bySum) }

// Lookup returns the grant of token, or false if the set does not hold it
// (an empty token is never held). It looks up token's SHA-256 digest (see
// the package comment).
func (s *Set) Lookup(token string) (*Grant, bool) {
	if token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	g, ok := s.bySum[sum]
	return g, ok
}

// File is a token file that can be read again (on SIGHUP) while lookups
// go on: a lookup sees the old set or the new one, never a mixture.
type File struct {
	path string
	cur  atomic.Pointer[Set]
}

// ErrEmpty is returned for a token file that holds no token: a service
// that refuses everyone is more likely a mistake than a wish.
var ErrEmpty = errors.New("no tokens")

// Load reads the token file at path.
func Load(path string) (*File, error) {
	f := &File{path: path}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads the file again and, if it parses, replaces the tokens; if
// it does not, the old tokens stay in force and the error says why.
func (f *File) Reload() error {
	fh, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	defer fh.Close()
	s, err := Parse(fh, f.path)
	if err != nil {
		return fmt.Errorf("token file %w", err)
	}
	if s.Len() == 0 {
		return fmt.Errorf("token file %s: %w", f.path, ErrEmpty)
	}
	f.cur.Store(s)
	return nil
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Set returns the tokens in force.
func (f *File) Set() *Set { return f.cur.Load() }

// Lookup looks token up in the tokens in force.
func (f *File) Lookup(token string) (*Grant, bool) { return f.cur.Load().Lookup(token) }
