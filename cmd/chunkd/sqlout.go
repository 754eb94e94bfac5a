package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"
)

// The output formats of chunkd sql. Each writes a statement's rows as
// they come: none holds the whole result.

// rowWriter writes one statement's rows: row for each, then close; or,
// when the statement fails, flush to write out the rows it had.
type rowWriter interface {
	row(vals []any) error
	flush() error
	close() error
}

func newRowWriter(format string, w io.Writer, cols []string) rowWriter {
	bw := bufio.NewWriter(w)
	switch format {
	case "table":
		return &tableWriter{w: bw, cols: cols, widths: make([]int, len(cols))}
	case "csv":
		cw := &csvWriter{w: bw}
		cw.line(cols)
		return cw
	default:
		bw.WriteString("[")
		return &jsonWriter{w: bw, cols: cols}
	}
}

// text is a value as the table and CSV formats show it: as sqlite3 does,
// except that a BLOB that is not UTF-8 is written x'00ff', a REAL with the
// fewest digits that read back as the same number (up to 17), and a NULL
// as the table's "NULL" (CSV writes none).
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return "x'" + hex.EncodeToString(x) + "'"
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case float64:
		return floatText(x)
	}
	return fmt.Sprint(v)
}

// floatText writes a REAL so that it reads as one, as sqlite3 does: 1.0,
// not 1. Plain decimals where they are exact and short (1000000.0, not
// 1e+06), exponents for the very large and very small (1.0e+20).
func floatText(x float64) string {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return strconv.FormatFloat(x, 'g', -1, 64) // +Inf, -Inf, NaN
	}
	var s string
	if a := math.Abs(x); a == 0 || (a >= 1e-4 && a < 1e15) {
		s = strconv.FormatFloat(x, 'f', -1, 64)
	} else {
		s = strconv.FormatFloat(x, 'e', -1, 64)
	}
	mant, exp, hasExp := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	if hasExp {
		return mant + "e" + exp
	}
	return mant
}

// tableBatch is how many rows the table format holds before it prints
// them: their widths set the columns' (the header's too). Later rows are
// printed a batch at a time, each column as wide as the widest value so
// far, so a wider value later moves the columns of its batch on, never
// those already printed.
const tableBatch = 100

// tableWriter writes a header line and a line per row, the columns
// aligned by display width (a CJK character or an emoji takes two
// cells) and two spaces apart.
type tableWriter struct {
	w       *bufio.Writer
	cols    []string
	widths  []int
	pending [][]string
	started bool // the header is out
}

var cellReplacer = strings.NewReplacer("\t", " ", "\n", " ")

func (t *tableWriter) row(vals []any) error {
	cells := make([]string, len(vals))
	for i, v := range vals {
		cells[i] = cellReplacer.Replace(text(v))
	}
	t.pending = append(t.pending, cells)
	if len(t.pending) < tableBatch {
		return nil
	}
	return t.printPending()
}

// printPending prints the rows held (after the header, the first time)
// and sends them on.
func (t *tableWriter) printPending() error {
	if !t.started {
		t.fit(t.cols)
	}
	for _, r := range t.pending {
		t.fit(r)
	}
	if !t.started {
		t.line(t.cols)
		t.started = true
	}
	for _, r := range t.pending {
		t.line(r)
	}
	t.pending = t.pending[:0]
	return t.w.Flush()
}

func (t *tableWriter) fit(cells []string) {
	for i, c := range cells {
		t.widths[i] = max(t.widths[i], runewidth.StringWidth(c))
	}
}

func (t *tableWriter) line(cells []string) {
	for i, c := range cells {
		t.w.WriteString(c)
		if i < len(cells)-1 {
			t.w.WriteString(strings.Repeat(" ", t.widths[i]-runewidth.StringWidth(c)+2))
		}
	}
	t.w.WriteByte('\n')
}

func (t *tableWriter) flush() error { return t.printPending() }
func (t *tableWriter) close() error { return t.printPending() }

// csvWriter writes CSV as sqlite3 -csv does: NULL is an empty field, and
// a value is quoted ("" for an empty TEXT or BLOB) when it is empty or
// holds a comma, a quote (" or '), a space, a control character or any
// byte outside ASCII, its quotes doubled.
type csvWriter struct{ w *bufio.Writer }

// csvQuoted reports whether sqlite3 quotes s in CSV.
func csvQuoted(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '"' || c == '\'' || c == ',' || c >= 0x7f {
			return true
		}
	}
	return false
}

func (c *csvWriter) field(s string) {
	if !csvQuoted(s) {
		c.w.WriteString(s)
		return
	}
	c.w.WriteByte('"')
	c.w.WriteString(strings.ReplaceAll(s, `"`, `""`))
	c.w.WriteByte('"')
}

func (c *csvWriter) line(fields []string) {
	for i, f := range fields {
		if i > 0 {
			c.w.WriteByte(',')
		}
		c.field(f)
	}
	c.w.WriteByte('\n')
}

func (c *csvWriter) row(vals []any) error {
	for i, v := range vals {
		if i > 0 {
			c.w.WriteByte(',')
		}
		if v != nil { // NULL is an empty field, as sqlite3 writes it
			c.field(text(v))
		}
	}
	return c.w.WriteByte('\n')
}

func (c *csvWriter) flush() error { return c.w.Flush() }
func (c *csvWriter) close() error { return c.w.Flush() }

// jsonWriter writes a JSON array of an object per row, its keys in
// column order; a name that appears twice (SELECT a.id, b.id) appears
// twice, as sqlite3's JSON mode writes it.
type jsonWriter struct {
	w    *bufio.Writer
	cols []string
	n    int
}

// jsonValue is a value as the json format writes it: numbers as numbers
// (a REAL keeps its ".0"), TEXT as a string, NULL as null, and a BLOB as
// {"blob":"HEX"} so that it cannot be taken for text.
func jsonValue(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return []byte(`{"blob":"` + hex.EncodeToString(x) + `"}`), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return json.Marshal(floatText(x)) // JSON has no infinities
		}
		return []byte(floatText(x)), nil
	}
	return json.Marshal(v)
}

func (j *jsonWriter) row(vals []any) error {
	var b bytes.Buffer
	if j.n > 0 {
		b.WriteByte(',')
	}
	b.WriteString("\n{")
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(j.cols[i])
		val, err := jsonValue(v)
		if err != nil {
			return fmt.Errorf("column %s: %w", j.cols[i], err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	j.n++
	_, err := j.w.Write(b.Bytes())
	return err
}

// flush writes the rows so far without closing the array: the result is
// not whole.
func (j *jsonWriter) flush() error { return j.w.Flush() }

func (j *jsonWriter) close() error {
	j.w.WriteString("\n]\n")
	return j.w.Flush()
}
