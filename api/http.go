package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/chunkd/chunkd/addr"
)

// Route patterns for net/http.ServeMux, with the path values "db" and
// "address" (read them with Request.PathValue, which undoes the escaping of
// DBPath).
const (
	// PatternChunk is the route of GET one chunk.
	PatternChunk = "GET /v1/dbs/{db}/chunks/{address}"
	// PatternChunks is the route of POST a batch of addresses.
	PatternChunks = "POST /v1/dbs/{db}/chunks"
	// PatternDB is the route of GET a database's DBInfo.
	PatternDB = "GET /v1/dbs/{db}"
	// PatternDoltFiles is the route of the Dolt remote's table-file
	// downloads, /dolt/v1/{db}/{file} with {db} unescaped and possibly
	// holding slashes (package doltremote). It takes every method, so that
	// the remote itself answers writes as a read-only remote.
	PatternDoltFiles = "/dolt/v1/"
)

// Header names and content types of the HTTP API.
const (
	// HeaderTier is the response header of GET one chunk that names the
	// chunk's Tier ("memory", "disk", "partial" or "store").
	HeaderTier = "Chunkd-Tier"
	// ContentTypeBinary is the content type of chunk bodies, batch requests
	// and frame streams.
	ContentTypeBinary = "application/octet-stream"
	// ContentTypeJSON is the content type of DBInfo and Error bodies.
	ContentTypeJSON = "application/json"
)

// DBPath returns the URL path of database db's DBInfo: /v1/dbs/{db}, with db
// path-escaped so that any non-empty name fits in one path segment (and the
// names "." and ".." are not taken for path steps).
func DBPath(db string) string { return DBsPrefix + escapeDB(db) }

// DBsPrefix begins the path of every route of one database.
const DBsPrefix = "/v1/dbs/"

// escapeDB escapes a database name for one path segment.
func escapeDB(db string) string {
	if db == "." || db == ".." {
		return strings.Repeat("%2E", len(db))
	}
	return url.PathEscape(db)
}

// ChunksPath returns the URL path that takes a batch of database db's
// addresses: /v1/dbs/{db}/chunks.
func ChunksPath(db string) string { return DBPath(db) + "/chunks" }

// ChunkPath returns the URL path of chunk a of database db:
// /v1/dbs/{db}/chunks/{address}, the address in its 32-character text form.
func ChunkPath(db string, a addr.Addr) string { return ChunksPath(db) + "/" + a.String() }

// The states of a TableInfo.
const (
	// StateRemote is a table file only in the object store.
	StateRemote = "remote"
	// StateDownloading is a table file being downloaded to the cache.
	StateDownloading = "downloading"
	// StateCached is a table file fully on the cache's disk.
	StateCached = "cached"
)

// DBInfo describes a database, as GET /v1/dbs/{db} returns it.
type DBInfo struct {
	// Name is the database's name.
	Name string `json:"name"`
	// Root is the database's root address in its text form.
	Root string `json:"root"`
	// Tables lists the table files of the database's manifest.
	Tables []TableInfo `json:"tables"`
}

// TableInfo describes one table file of a database.
type TableInfo struct {
	// Name is the table file's name (its address in text form).
	Name string `json:"name"`
	// Size is the table file's size in bytes.
	Size int64 `json:"size"`
	// Chunks is the number of chunks the table file holds.
	Chunks int `json:"chunks"`
	// Appendix reports whether the table file is in the manifest's appendix.
	Appendix bool `json:"appendix"`
	// State is the file's state in this cache: StateRemote, StateDownloading
	// or StateCached.
	State string `json:"state"`
	// Downloaded is the number of bytes of the file on the cache's disk:
	// Size when cached, 0 when remote.
	Downloaded int64 `json:"downloaded"`
}

// Error is the JSON body of every HTTP answer other than 200:
// {"error": "message"}. It is also an error, so a client can return it.
type Error struct {
	// Message says what went wrong.
	Message string `json:"error"`
	// Kind names what went wrong in the terms a client acts on, as
	// docs/service.md's error table does ("unknown database", "no such
	// version", ...); "" from a service that does not say.
	Kind string `json:"kind,omitempty"`
	// SQLite is SQLite's own account of a query's error (the query API).
	SQLite *SQLiteError `json:"sqlite,omitempty"`
	// Code is the HTTP status code the error came with. It is not part of
	// the JSON body; ReadError fills it in.
	Code int `json:"-"`
}

// SQLiteError is SQLite's account of an error: its result code and its
// name, its message, and where in the statement it is.
type SQLiteError struct {
	// Code is the primary result code (1 for SQLITE_ERROR, 9
	// SQLITE_INTERRUPT, 23 SQLITE_AUTH, ...), ExtendedCode the extended
	// one, and Name the code's name ("SQLITE_ERROR").
	Code         int    `json:"code"`
	ExtendedCode int    `json:"extended_code"`
	Name         string `json:"name"`
	// Message is SQLite's message ("no such table: x").
	Message string `json:"message"`
	// Offset is where in the SQL text the error is, in bytes, if SQLite
	// says (else absent).
	Offset *int `json:"offset,omitempty"`
}

// Error returns the message, after the status code when there is one.
func (e *Error) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("chunkd: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
	}
	return "chunkd: " + e.Message
}

// WriteError answers with status code and the JSON body {"error": msg}.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteErrorKind(w, code, "", msg)
}

// WriteErrorKind is WriteError with the error's kind (Error.Kind).
func WriteErrorKind(w http.ResponseWriter, code int, kind, msg string) {
	WriteErrorBody(w, code, &Error{Message: msg, Kind: kind})
}

// WriteErrorBody answers with status code and e as the JSON body.
func WriteErrorBody(w http.ResponseWriter, code int, e *Error) {
	body, err := json.Marshal(e)
	if err != nil { // cannot happen for a string, but never send nothing
		body = []byte(`{"error":"internal error"}`)
	}
	h := w.Header()
	h.Del("Content-Length")
	h.Del(HeaderTier)
	h.Set("Content-Type", ContentTypeJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(body, '\n')) //nolint:errcheck // nothing to do if the client left
}

// Kinds of errors a client acts on (Error.Kind).
const (
	// KindNoSuchVersion: the database has no version of the root asked
	// for (the all-zero root names none).
	KindNoSuchVersion = "no such version"
	// KindVersionCollected: the database had the version, and garbage
	// collection removed it.
	KindVersionCollected = "version collected"
)

// maxErrorBody is how much of an error body ReadError reads.
const maxErrorBody = 64 << 10

// ReadError turns an answer other than 200 into an *Error with its Code set:
// the message of its JSON body, or, for a body that is not one (say, from a
// proxy), its first line of text or the status text. It reads at most 64 KiB
// of the body and does not close it.
func ReadError(resp *http.Response) *Error {
	e := &Error{Code: resp.StatusCode}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	}
	var parsed Error
	if json.Unmarshal(body, &parsed) == nil && parsed.Message != "" {
		e.Message, e.Kind, e.SQLite = parsed.Message, parsed.Kind, parsed.SQLite
		return e
	}
	text, _, _ := strings.Cut(string(bytes.TrimSpace(body)), "\n")
	if text = strings.TrimSpace(text); text != "" {
		e.Message = clip(text)
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// PatternRoot is the route of GET a database's current root
// (RootPath; ?fresh=1 asks for a strictly fresh one).
const PatternRoot = "GET /v1/dbs/{db}/root"

// RootPath returns the URL path of database db's root: /v1/dbs/{db}/root.
// With fresh, the service checks the store's manifest before it answers.
func RootPath(db string, fresh bool) string {
	if fresh {
		return DBPath(db) + "/root?fresh=1"
	}
	return DBPath(db) + "/root"
}

// RootInfo is a database's current root as the service knows it, and how
// fresh that knowledge is: the service checks the store's manifest at
// most every ManifestTTL before it answers (and at once when asked for a
// fresh root), so Root is at most that old unless Stale says the store
// could not be asked.
type RootInfo struct {
	// Root is the root address in its text form.
	Root string `json:"root"`
	// AgeMS is how long ago, in milliseconds, the service last read or
	// checked the manifest; -1 when it never has since it started (the
	// root is from the state it saved: see Stale).
	AgeMS int64 `json:"age_ms"`
	// TTLMS is the service's --manifest-ttl in milliseconds.
	TTLMS int64 `json:"ttl_ms"`
	// Stale says the service could not check the store this time (down,
	// or denying access): Root is the last one it knows.
	Stale bool `json:"stale,omitempty"`
}

// PatternOpenSet is the route of GET a chunkd SQLite version's open set
// (sqlchunks.OpenSet): the chunks a fresh reader needs before SQLite can
// find any row, as a frame stream in their order (Index from 0). Query:
// root=ROOT (default: the current root), fresh=1 (with no root: checked
// against the store's manifest first), pages=0 (the root chunk and page
// map only, not page 1 and the interior pages: for a client that reads
// pages from a page image). The answer's HeaderRoot names the version;
// it has a Content-Length, and every frame's tier is TierMemory (the
// service keeps the sets of the versions last asked for in memory, encoded
// as their answer).
const PatternOpenSet = "GET /v1/dbs/{db}/sqlite/open"

// PatternVersionImage is the route of GET a chunkd SQLite version's page
// image as the service names it (a VersionImage, JSON): the service reads
// the version's root chunk and page map itself (proved, as every chunk it
// reads), registers the image of its pages and answers the root chunk and
// the image, so a same-host client opens a version in one small request,
// without the page map (about 1 MiB for a 200 MiB database) or naming the
// image itself. Query: root=ROOT (default: the current root), fresh=1
// (with no root: checked against the store's manifest first).
const PatternVersionImage = "GET /v1/dbs/{db}/sqlite/image"

// VersionImage is the answer of PatternVersionImage.
type VersionImage struct {
	// Root is the version's root, and RootChunk its root chunk (the
	// client checks that it hashes to Root).
	Root      string `json:"root"`
	RootChunk []byte `json:"root_chunk"`
	// Image is the page image of the version's pages: slot n-1 is page n.
	Image ImageInfo `json:"image"`
	// Current, for a request of the current root (no root=), is how
	// fresh that root is, as PatternRoot answers it.
	Current *RootInfo `json:"current,omitempty"`
}

// VersionImagePath returns the URL path of database db's page image of
// version root (zero: the current root; fresh asks for it checked first).
func VersionImagePath(db string, root addr.Addr, fresh bool) string {
	p := DBPath(db) + "/sqlite/image"
	switch {
	case !root.IsEmpty():
		return p + "?root=" + root.String()
	case fresh:
		return p + "?fresh=1"
	}
	return p
}

// HeaderRoot is the header of an open set's answer naming its version.
const HeaderRoot = "Chunkd-Root"

// Headers of an open set's answer for the current root (no root=): how
// fresh that root is, as RootInfo's AgeMS and Stale ("1") say.
const (
	HeaderRootAge   = "Chunkd-Root-Age-Ms"
	HeaderRootStale = "Chunkd-Root-Stale"
)

// SetRootFreshness sets h's HeaderRootAge and HeaderRootStale from info.
func SetRootFreshness(h http.Header, info RootInfo) {
	h.Set(HeaderRootAge, strconv.FormatInt(info.AgeMS, 10))
	if info.Stale {
		h.Set(HeaderRootStale, "1")
	}
}

// RootFreshness reads what SetRootFreshness set (ageMS -1 for a value
// that does not parse); ok is false if h has no HeaderRootAge (an answer
// for a root asked for by name).
func RootFreshness(h http.Header) (ageMS int64, stale, ok bool) {
	v := h.Get(HeaderRootAge)
	if v == "" {
		return 0, false, false
	}
	age, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		age = -1
	}
	return age, h.Get(HeaderRootStale) == "1", true
}

// OpenSetPath returns the URL path of database db's open set for root
// (zero: the current root; fresh asks for it checked first), with its
// pages or without (PatternOpenSet).
func OpenSetPath(db string, root addr.Addr, fresh, pages bool) string {
	q := url.Values{}
	switch {
	case !root.IsEmpty():
		q.Set("root", root.String())
	case fresh:
		q.Set("fresh", "1")
	}
	if !pages {
		q.Set("pages", "0")
	}
	p := DBPath(db) + "/sqlite/open"
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}
