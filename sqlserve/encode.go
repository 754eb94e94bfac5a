package sqlserve

import (
	"encoding/json"
	"strconv"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/sqlitevfs"
)

// format is a result's encoding (api.QueryResult documents them).
type format uint8

const (
	formatJSON format = iota
	formatNDJSON
	formatCSV
)

func (f format) contentType() string {
	switch f {
	case formatNDJSON:
		return api.ContentTypeNDJSON
	case formatCSV:
		return api.ContentTypeCSV
	}
	return api.ContentTypeJSON
}

func (f format) String() string {
	switch f {
	case formatNDJSON:
		return "ndjson"
	case formatCSV:
		return "csv"
	}
	return "json"
}

// parseFormat reads format= (json, ndjson, csv).
func parseFormat(s string) (format, bool) {
	switch s {
	case "json":
		return formatJSON, true
	case "ndjson", "jsonl":
		return formatNDJSON, true
	case "csv":
		return formatCSV, true
	}
	return 0, false
}

// The encoders append a result's parts to a buffer: its head (the root
// and the columns), each row, and its end (the row count, whether the
// limit cut it short, and an error that ended it after rows were sent:
// CSV has no place for one, and the answer is cut off instead).

func appendHead(b []byte, f format, root string, cols []sqlitevfs.Column) []byte {
	switch f {
	case formatCSV:
		for i, c := range cols {
			if i > 0 {
				b = append(b, ',')
			}
			b = api.AppendCSVText(b, []byte(c.Name))
		}
		return append(b, '\r', '\n')
	case formatNDJSON:
		b = appendHeader(b, root, cols)
		return append(b, "}\n"...)
	}
	b = appendHeader(b, root, cols)
	return append(b, `,"rows":[`...)
}

// appendHeader appends the members of api.QueryHeader, as an object not
// yet closed.
func appendHeader(b []byte, root string, cols []sqlitevfs.Column) []byte {
	b = append(b, `{"root":"`...)
	b = append(b, root...)
	b = append(b, `","columns":[`...)
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONText(b, c.Name)
		b = append(b, `,"type":`...)
		b = appendJSONText(b, c.DeclType)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendJSONText appends s as a JSON string (names from SQLite: any
// bytes; what is not UTF-8 is replaced, as encoding/json does).
func appendJSONText(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

func appendRow(b []byte, f format, n int, row []sqlitevfs.Value) []byte {
	switch f {
	case formatCSV:
		for i, v := range row {
			if i > 0 {
				b = append(b, ',')
			}
			b = api.AppendCSVValue(b, wireValue(v))
		}
		return append(b, '\r', '\n')
	case formatJSON:
		if n > 0 {
			b = append(b, ',')
		}
	}
	b = append(b, '[')
	for i, v := range row {
		if i > 0 {
			b = append(b, ',')
		}
		b = api.AppendValueJSON(b, wireValue(v))
	}
	b = append(b, ']')
	if f == formatNDJSON {
		b = append(b, '\n')
	}
	return b
}

// wireValue is v as the API writes it.
func wireValue(v sqlitevfs.Value) api.Value {
	switch v.Type {
	case sqlitevfs.Integer:
		return api.Value{Type: api.SQLInteger, Int: v.Int}
	case sqlitevfs.Float:
		return api.Value{Type: api.SQLReal, Real: v.Float}
	case sqlitevfs.Text:
		return api.Value{Type: api.SQLText, Bytes: v.Bytes}
	case sqlitevfs.Blob:
		return api.Value{Type: api.SQLBlob, Bytes: v.Bytes}
	}
	return api.Value{}
}

// localValue is v as SQLite binds it.
func localValue(v api.Value) sqlitevfs.Value {
	switch v.Type {
	case api.SQLInteger:
		return sqlitevfs.Value{Type: sqlitevfs.Integer, Int: v.Int}
	case api.SQLReal:
		return sqlitevfs.Value{Type: sqlitevfs.Float, Float: v.Real}
	case api.SQLText:
		return sqlitevfs.Value{Type: sqlitevfs.Text, Bytes: v.Bytes}
	case api.SQLBlob:
		return sqlitevfs.Value{Type: sqlitevfs.Blob, Bytes: v.Bytes}
	}
	return sqlitevfs.Value{Type: sqlitevfs.Null}
}

func appendEnd(b []byte, f format, rows int, truncated bool, err *api.Error) []byte {
	switch f {
	case formatCSV:
		return b
	case formatJSON:
		b = append(b, ']')
	case formatNDJSON:
		b = append(b, '{')
	}
	if f == formatJSON {
		b = append(b, ',')
	}
	b = append(b, `"row_count":`...)
	b = strconv.AppendInt(b, int64(rows), 10)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, truncated)
	if err != nil {
		e, _ := json.Marshal(err)
		b = append(b, `,"error":`...)
		b = append(b, e...)
	}
	return append(b, "}\n"...)
}
