package sqltest

import (
	"bytes"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"testing"

	"github.com/chunkd/chunkd/api"
)

// EdgeCases are queries of typed edge cases, each a row or a few: NULL
// and ”, integers at and past 2^53 and at the ends of 64 bits, reals
// (with the digits that do not print short, an integral one, infinities),
// blobs (empty, binary), unicode text, text that is not UTF-8, text with
// the characters a format must quote.
var EdgeCases = []string{
	`SELECT NULL AS a, '' AS b, 0 AS c, x'' AS d`,
	`SELECT 9007199254740991, 9007199254740992, -9007199254740993, 9223372036854775807, -9223372036854775808`,
	`SELECT 0.1, 1.0, -2.5, 1e300, 5e-324, 1e999, -1e999, 123456789.125, 1e-7`,
	`SELECT x'00ff10', x'', zeroblob(3), CAST('abc' AS BLOB)`,
	`SELECT 'héllo, 世界 🌍', 'tab	and
newline', 'quote" and '' and ,comma', CAST(x'ff41' AS TEXT), char(8232, 127)`,
	`SELECT typeof(x), x FROM (SELECT 1 AS x UNION ALL SELECT 1.5 UNION ALL SELECT 'one' UNION ALL SELECT x'01' UNION ALL SELECT NULL) ORDER BY 1`,
	`SELECT id, v, typeof(v), d, b FROM edge ORDER BY id`,
}

// AddEdgeTable adds the table edge of the EdgeCases to the database at
// path: a value of every kind in a column of no type, with columns
// declared DATE and BOOLEAN (which database/sql's driver would turn into
// a time and a bool) holding what SQLite keeps as text and integers.
func AddEdgeTable(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE edge(id INTEGER PRIMARY KEY, v, d DATE, b BOOLEAN)`,
		`INSERT INTO edge VALUES (1, NULL, '2024-01-02', 1), (2, '', '2024-01-02 03:04:05', 0), (3, 9223372036854775807, 20240102, 'yes'),
			(4, -9223372036854775808, NULL, NULL), (5, 0.1, NULL, NULL), (6, 1e999, NULL, NULL), (7, x'00ff10', NULL, NULL), (8, x'', NULL, NULL),
			(9, 'héllo, 世界 🌍', NULL, NULL), (10, CAST(x'ff41' AS TEXT), NULL, NULL), (11, 1.0, NULL, NULL), (12, 9007199254740993, NULL, NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// Shell runs query on the database file at path with the system's
// sqlite3 shell (read-only, no ~/.sqliterc) and returns its rows as
// typed values, read from its quote mode (SQL literals, reals with 20
// digits: every double exactly). It skips the test when there is no
// sqlite3 on PATH.
func Shell(t testing.TB, path, query string) [][]api.Value {
	t.Helper()
	bin, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("no sqlite3 shell on PATH (apt-get install sqlite3): the reference this test compares with")
	}
	out, err := exec.Command(bin, "-init", "/dev/null", "-readonly", "-quote", path, query).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("sqlite3 %s %q: %v: %s", path, query, err, stderr)
	}
	rows, err := parseQuoted(out)
	if err != nil {
		t.Fatalf("sqlite3 %q: %v in its output:\n%s", query, err, out)
	}
	return rows
}

// parseQuoted reads the sqlite3 shell's quote mode: a line a row, values
// as SQL literals separated by commas ('text' may hold newlines).
func parseQuoted(b []byte) ([][]api.Value, error) {
	var rows [][]api.Value
	var row []api.Value
	for len(b) > 0 {
		var v api.Value
		switch c := b[0]; {
		case c == '\'':
			var text []byte
			i := 1
			for {
				j := bytes.IndexByte(b[i:], '\'')
				if j < 0 {
					return nil, fmt.Errorf("unterminated string")
				}
				text = append(text, b[i:i+j]...)
				i += j + 1
				if i < len(b) && b[i] == '\'' {
					text = append(text, '\'')
					i++
					continue
				}
				break
			}
			v, b = api.Value{Type: api.SQLText, Bytes: text}, b[i:]
		case c == 'X' && len(b) > 1 && b[1] == '\'':
			j := bytes.IndexByte(b[2:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated blob")
			}
			d, err := hex.DecodeString(string(b[2 : 2+j]))
			if err != nil {
				return nil, err
			}
			v, b = api.BlobValue(d), b[3+j:]
		default:
			end := bytes.IndexAny(b, ",\n")
			if end < 0 {
				end = len(b)
			}
			tok := string(b[:end])
			b = b[end:]
			switch {
			case tok == "NULL":
				v = api.Value{}
			case tok == "Inf":
				v = api.RealValue(math.Inf(1))
			case tok == "-Inf":
				v = api.RealValue(math.Inf(-1))
			case bytes.ContainsAny([]byte(tok), ".eE"):
				f, err := strconv.ParseFloat(tok, 64)
				if err != nil {
					return nil, err
				}
				v = api.RealValue(f)
			default:
				i, err := strconv.ParseInt(tok, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("bad value %q", tok)
				}
				v = api.IntValue(i)
			}
		}
		row = append(row, v)
		if len(b) == 0 {
			return nil, fmt.Errorf("output ends without a newline")
		}
		switch b[0] {
		case ',':
			b = b[1:]
		case '\n':
			rows, row = append(rows, row), nil
			b = b[1:]
		default:
			return nil, fmt.Errorf("unexpected %q after a value", b[0])
		}
	}
	return rows, nil
}
