package api

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// The query API (docs/api.md): read-only SQL on a chunkd SQLite database,
// at its current version or a given root.
const (
	// PatternQuery is the route of GET a query: its parameters in the URL
	// (sql=, at=, params= as JSON, max_rows=, format=, fresh=1).
	PatternQuery = "GET /v1/dbs/{db}/query"
	// PatternQueryPost is the route of POST a query: a QueryRequest as
	// the JSON body.
	PatternQueryPost = "POST /v1/dbs/{db}/query"
	// PatternVersions is the route of GET a database's versions, newest
	// first (a []VersionInfo; limit= caps them, default 100).
	PatternVersions = "GET /v1/dbs/{db}/versions"
)

// QueryPath returns the URL path of database db's queries.
func QueryPath(db string) string { return DBPath(db) + "/query" }

// VersionsPath returns the URL path of database db's versions.
func VersionsPath(db string) string { return DBPath(db) + "/versions" }

// Headers and content types of the query API. HeaderRoot names the root
// that answered.
const (
	// HeaderResultCache says whether the result cache answered: "hit",
	// "miss" (run, and kept if it fits), or "off" (not kept: the cache
	// is off, or the statement calls a function whose result changes,
	// such as random() or datetime('now')).
	HeaderResultCache = "Chunkd-Result-Cache"
	// HeaderTruncated is "true" when the rows stop at the row or byte
	// limit and more would follow, and HeaderRows counts the rows sent.
	// They are headers when the service knows them before the body (the
	// answer fits its first buffer, or was cached), else trailers.
	HeaderTruncated = "Chunkd-Truncated"
	HeaderRows      = "Chunkd-Rows"
	// ContentTypeNDJSON is a result as JSON lines: a QueryHeader, a row
	// (a JSON array of values) a line, and a QueryTrailer.
	ContentTypeNDJSON = "application/x-ndjson"
	// ContentTypeCSV is a result as CSV (RFC 4180): a line of column
	// names, then the rows.
	ContentTypeCSV = "text/csv; charset=utf-8"
)

// Kinds of the query API's errors (Error.Kind).
const (
	// KindBadQuery: SQLite could not run the statement as given (a syntax
	// error, an unknown table, parameters that do not fit, no statement
	// or more than one, an error while it ran): HTTP 400.
	KindBadQuery = "bad query"
	// KindReadOnly: the statement would do more than read (write,
	// ATTACH, load_extension, a pragma that sets something): HTTP 403.
	KindReadOnly = "read-only"
	// KindQueryTimeout: the statement ran past the service's
	// --query-timeout and was interrupted: HTTP 400.
	KindQueryTimeout = "query timeout"
)

// QueryRequest is the body of a POST query.
type QueryRequest struct {
	// SQL is one statement that only reads.
	SQL string `json:"sql"`
	// Params are bound to the statement's parameters: a JSON array for
	// ? and ?NNN, or an object for :name, @name and $name (its keys with
	// or without the prefix).
	Params *Params `json:"params,omitempty"`
	// At is the root of the version to read; "" for the current one.
	At string `json:"at,omitempty"`
	// MaxRows lowers the service's row limit for this query (0: the
	// service's).
	MaxRows int `json:"max_rows,omitempty"`
	// Fresh has the service check the store's manifest before it names
	// the current version.
	Fresh bool `json:"fresh,omitempty"`
}

// Params are a query's parameters: positional (List) or named (Named).
type Params struct {
	List  []Value
	Named map[string]Value
}

func (p Params) MarshalJSON() ([]byte, error) {
	if p.Named != nil {
		return json.Marshal(p.Named)
	}
	if p.List == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(p.List)
}

func (p *Params) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '[':
		p.Named = nil
		return json.Unmarshal(b, &p.List)
	case len(b) > 0 && b[0] == '{':
		p.List = nil
		return json.Unmarshal(b, &p.Named)
	}
	return errors.New("params: want a JSON array (for ? parameters) or object (for :name ones)")
}

// VersionInfo is one version of a chunkd SQLite database, as
// PatternVersions lists them.
type VersionInfo struct {
	// Root names the version (a query's at=), Parent the one before it
	// ("" for the first).
	Root   string `json:"root"`
	Parent string `json:"parent,omitempty"`
	// Time is when it was published (RFC 3339), Message what its import
	// said.
	Time    string `json:"time"`
	Message string `json:"message,omitempty"`
	// PageSize and Pages are the database file's.
	PageSize int   `json:"page_size"`
	Pages    int64 `json:"pages"`
	// Current marks the version the service reads for "current".
	Current bool `json:"current,omitempty"`
}

// QueryColumn is a result column: its name, and the type its table
// declares ("" for an expression).
type QueryColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// QueryHeader is what precedes a result's rows: the root of the version
// that answered and the columns. It is the first line of an NDJSON
// result, and the first members of a JSON one.
type QueryHeader struct {
	Root    string        `json:"root"`
	Columns []QueryColumn `json:"columns"`
}

// QueryTrailer is what follows the rows: how many were sent, whether more
// would have followed (the row or byte limit stopped them), and an error
// that ended the result after its first rows were sent (the answer's
// status was 200 by then). It is the last line of an NDJSON result, and
// the last members of a JSON one.
type QueryTrailer struct {
	RowCount  int    `json:"row_count"`
	Truncated bool   `json:"truncated"`
	Error     *Error `json:"error,omitempty"`
}

// QueryResult is a JSON result (application/json):
//
//	{"root":"…","columns":[{"name":"id","type":"INTEGER"}],"rows":[[1],[2]],"row_count":2,"truncated":false}
//
// A row is an array of Values, one a column.
type QueryResult struct {
	QueryHeader
	Rows [][]Value `json:"rows"`
	QueryTrailer
}

// SQLType is a value's storage class in SQLite.
type SQLType uint8

// The storage classes.
const (
	SQLNull SQLType = iota
	SQLInteger
	SQLReal
	SQLText
	SQLBlob
)

func (t SQLType) String() string {
	switch t {
	case SQLNull:
		return "null"
	case SQLInteger:
		return "integer"
	case SQLReal:
		return "real"
	case SQLText:
		return "text"
	case SQLBlob:
		return "blob"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Value is one SQL value with its storage class: Int for an INTEGER, Real
// for a REAL, Bytes for TEXT and BLOB. Its JSON form keeps the class:
//
//	null                      NULL
//	42                        INTEGER (a number without '.' or 'e': |v| < 2^53)
//	{"int":"9007199254740993"} INTEGER beyond 2^53-1, as a decimal string
//	0.1, 1.0, 1.5e+300        REAL (always with '.' or an exponent)
//	{"real":"Infinity"}       REAL that is infinite ("-Infinity")
//	"text"                    TEXT that is valid UTF-8
//	{"text":"/0E="}           TEXT that is not, its bytes in base64
//	{"blob":"AP8Q"}           BLOB, in base64 (standard, padded)
//
// so NULL and ” differ, integers are exact, and no REAL reads as an
// INTEGER. A JavaScript client tells an INTEGER from a REAL by the
// number's source text (JSON.parse's reviver has it, as the console
// does).
type Value struct {
	Type  SQLType
	Int   int64
	Real  float64
	Bytes []byte
}

// Convenience constructors.
func IntValue(i int64) Value    { return Value{Type: SQLInteger, Int: i} }
func RealValue(f float64) Value { return Value{Type: SQLReal, Real: f} }
func TextValue(s string) Value  { return Value{Type: SQLText, Bytes: []byte(s)} }
func BlobValue(b []byte) Value  { return Value{Type: SQLBlob, Bytes: b} }
func (v Value) IsNull() bool    { return v.Type == SQLNull }
func (v Value) String() string  { return string(AppendValueJSON(nil, v)) }
func (v Value) Equal(o Value) bool {
	if v.Type != o.Type {
		return false
	}
	switch v.Type {
	case SQLInteger:
		return v.Int == o.Int
	case SQLReal:
		return v.Real == o.Real || (math.IsNaN(v.Real) && math.IsNaN(o.Real))
	case SQLText, SQLBlob:
		return bytes.Equal(v.Bytes, o.Bytes)
	}
	return true
}

// maxSafeInt is the largest integer a JSON number carries exactly to
// every reader (2^53-1: JavaScript's Number.MAX_SAFE_INTEGER).
const maxSafeInt = 1<<53 - 1

func (v Value) MarshalJSON() ([]byte, error) { return AppendValueJSON(nil, v), nil }

// AppendValueJSON appends v's JSON form to b.
func AppendValueJSON(b []byte, v Value) []byte {
	switch v.Type {
	case SQLInteger:
		if v.Int > maxSafeInt || v.Int < -maxSafeInt {
			b = append(b, `{"int":"`...)
			b = strconv.AppendInt(b, v.Int, 10)
			return append(b, `"}`...)
		}
		return strconv.AppendInt(b, v.Int, 10)
	case SQLReal:
		if math.IsInf(v.Real, 0) || math.IsNaN(v.Real) {
			b = append(b, `{"real":"`...)
			b = AppendReal(b, v.Real)
			return append(b, `"}`...)
		}
		return AppendReal(b, v.Real)
	case SQLText:
		if utf8.Valid(v.Bytes) {
			return AppendJSONString(b, v.Bytes)
		}
		b = append(b, `{"text":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.Bytes)
		return append(b, `"}`...)
	case SQLBlob:
		b = append(b, `{"blob":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.Bytes)
		return append(b, `"}`...)
	}
	return append(b, "null"...)
}

func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errors.New("empty value")
	}
	switch c := b[0]; {
	case bytes.Equal(b, []byte("null")):
		*v = Value{}
	case c == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = TextValue(s)
	case c == '-' || c >= '0' && c <= '9':
		if bytes.ContainsAny(b, ".eE") {
			f, err := strconv.ParseFloat(string(b), 64)
			if err != nil {
				return fmt.Errorf("bad REAL %s: %w", b, err)
			}
			*v = RealValue(f)
			return nil
		}
		i, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("bad INTEGER %s (beyond 64 bits? write a REAL with a '.')", b)
		}
		*v = IntValue(i)
	case c == '{':
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil || len(m) != 1 {
			return fmt.Errorf(`bad value %s: want {"int":…}, {"real":…}, {"text":…} or {"blob":…}, with a string`, clipBytes(b))
		}
		for k, s := range m {
			switch k {
			case "int":
				i, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return fmt.Errorf("bad INTEGER %q", s)
				}
				*v = IntValue(i)
			case "real":
				f, err := parseReal(s)
				if err != nil {
					return err
				}
				*v = RealValue(f)
			case "text", "blob":
				d, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return fmt.Errorf("bad %s %q: not base64", k, clip(s))
				}
				*v = Value{Type: SQLText, Bytes: d}
				if k == "blob" {
					v.Type = SQLBlob
				}
			default:
				return fmt.Errorf("bad value %s: no type %q (int, real, text, blob)", clipBytes(b), k)
			}
		}
	default:
		return fmt.Errorf("bad value %s: SQL values are null, numbers, strings and {\"blob\":…}-style objects", clipBytes(b))
	}
	return nil
}

func parseReal(s string) (float64, error) {
	switch s {
	case "Infinity", "Inf", "+Infinity":
		return math.Inf(1), nil
	case "-Infinity", "-Inf":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("bad REAL %q", s)
	}
	return f, nil
}

func clipBytes(b []byte) string { return clip(string(b)) }

// AppendReal appends f as text that reads back as the same REAL and as a
// REAL: the fewest digits that do, always with a '.' or an exponent
// (1.0, 0.1, 1.5e+300, 1.0e-07); infinities as Infinity and -Infinity.
func AppendReal(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	}
	start := len(b)
	if a := math.Abs(f); a == 0 || (a >= 1e-4 && a < 1e15) {
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	} else {
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	mant := b[start:]
	e := bytes.IndexByte(mant, 'e')
	if e < 0 {
		e = len(mant)
	}
	if bytes.IndexByte(mant[:e], '.') >= 0 {
		return b
	}
	// Insert ".0" before the exponent (or at the end).
	at := start + e
	b = append(b, 0, 0)
	copy(b[at+2:], b[at:len(b)-2])
	b[at], b[at+1] = '.', '0'
	return b
}

// AppendJSONString appends s, valid UTF-8, as a JSON string.
func AppendJSONString(b, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x80 {
			i++
			continue
		}
		if c < 0x80 {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == '\u2028' || r == '\u2029' { // valid JSON, but not in older JavaScript
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendCSVValue appends v as a CSV field: NULL as an empty field, ”
// as "", INTEGER and REAL as text (AppendReal; infinities as Inf and
// -Inf, as sqlite3 writes them), TEXT as its bytes, BLOB as x'hex'.
// Fields are quoted when they hold a comma, a quote, CR or LF, or are
// empty text.
func AppendCSVValue(b []byte, v Value) []byte {
	switch v.Type {
	case SQLNull:
		return b
	case SQLInteger:
		return strconv.AppendInt(b, v.Int, 10)
	case SQLReal:
		switch {
		case math.IsInf(v.Real, 1):
			return append(b, "Inf"...)
		case math.IsInf(v.Real, -1):
			return append(b, "-Inf"...)
		}
		return AppendReal(b, v.Real)
	case SQLBlob:
		b = append(b, "x'"...)
		b = hex.AppendEncode(b, v.Bytes)
		return append(b, '\'')
	}
	return AppendCSVText(b, v.Bytes)
}

// AppendCSVText appends s as a CSV field, quoted if it must be (and if
// it is empty, so that it differs from NULL).
func AppendCSVText(b, s []byte) []byte {
	if len(s) > 0 && bytes.IndexAny(s, ",\"\r\n") < 0 {
		return append(b, s...)
	}
	b = append(b, '"')
	for {
		i := bytes.IndexByte(s, '"')
		if i < 0 {
			break
		}
		b = append(b, s[:i+1]...)
		b = append(b, '"')
		s = s[i+1:]
	}
	b = append(b, s...)
	return append(b, '"')
}

// QueryStream reads an NDJSON result (ContentTypeNDJSON) as it comes.
type QueryStream struct {
	Header  QueryHeader
	Trailer QueryTrailer // set once Next has returned io.EOF
	sc      *bufio.Scanner
	done    bool
}

// maxLine is the longest line a QueryStream reads (a row).
const maxLine = 256 << 20

// NewQueryStream reads the result's header line.
func NewQueryStream(r io.Reader) (*QueryStream, error) {
	s := &QueryStream{sc: bufio.NewScanner(r)}
	s.sc.Buffer(make([]byte, 64<<10), maxLine)
	if !s.sc.Scan() {
		return nil, fmt.Errorf("query result: no header line: %w", orEOF(s.sc.Err()))
	}
	if err := json.Unmarshal(s.sc.Bytes(), &s.Header); err != nil {
		return nil, fmt.Errorf("query result: bad header line: %w", err)
	}
	return s, nil
}

func orEOF(err error) error {
	if err == nil {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Next returns the next row; io.EOF after the last one, when Trailer is
// set; the trailer's error when the result ended in one; and an error
// when the stream ends before its trailer (cut short).
func (s *QueryStream) Next() ([]Value, error) {
	if s.done {
		return nil, io.EOF
	}
	if !s.sc.Scan() {
		return nil, fmt.Errorf("query result cut short after %d rows: %w", s.Trailer.RowCount, orEOF(s.sc.Err()))
	}
	line := s.sc.Bytes()
	if len(line) > 0 && line[0] == '{' {
		s.done = true
		n := s.Trailer.RowCount
		if err := json.Unmarshal(line, &s.Trailer); err != nil {
			return nil, fmt.Errorf("query result: bad trailer line: %w", err)
		}
		if s.Trailer.Error != nil {
			return nil, s.Trailer.Error
		}
		if s.Trailer.RowCount != n {
			return nil, fmt.Errorf("query result: %d rows read, the trailer says %d", n, s.Trailer.RowCount)
		}
		return nil, io.EOF
	}
	var row []Value
	if err := json.Unmarshal(line, &row); err != nil {
		return nil, fmt.Errorf("query result: bad row %d: %w", s.Trailer.RowCount+1, err)
	}
	s.Trailer.RowCount++
	return row, nil
}
