package sqlserve

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
)

// FuzzQuery sends the query API any statement, parameters, version and
// format, by GET and by POST. Whatever they are, the answer is a result
// in the format asked for or an error body with a kind, never a 5xx, in
// bounded time; the database is never changed, and the service goes on
// answering.
func FuzzQuery(f *testing.F) {
	for _, s := range []struct{ sql, params, at, format string }{
		{"SELECT id, v FROM edge ORDER BY id", "", "", "json"},
		{"SELECT * FROM sentences WHERE SentenceId = ?", "[3]", "", "ndjson"},
		{"SELECT :a, @b, $c", `{"a":1,"@b":"x","c":{"blob":"AA=="}}`, "", "csv"},
		{"INSERT INTO edge(id) VALUES (99)", "", "", "json"},
		{"ATTACH 'x' AS y", "", "", "json"},
		{"SELECT load_extension('x')", "", "", "json"},
		{"PRAGMA writable_schema = 1", "", "", "json"},
		{"SELECT 1; DELETE FROM edge", "", "", "json"},
		{"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) SELECT count(*) FROM n", "", "", "ndjson"},
		{"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) SELECT i FROM n", "", "", "csv"},
		{"SELECT zeroblob(1e9)", "", "", "json"},
		{"SELECT x'00', '\u2028', 1e999, -9223372036854775808", "", "", "json"},
		{"", "[]", "zzz", "xml"},
		{"SELECT ?", `[{"int":"1"}]`, "0000000000000000000000000000000a", "json"},
		{"/* */ ;", "{}", "", ""},
		{"SELECT * FROM pragma_table_info('edge')", "", "current", "ndjson"},
	} {
		f.Add(s.sql, s.params, s.at, s.format)
	}
	fx := newQueryFixture(f, []int{300}, cache.Config{}, Config{QueryTimeout: 200 * time.Millisecond, QueryMaxBytes: 1 << 20, QueryMaxRows: 5000})
	before := fx.digest(f)
	f.Fuzz(func(t *testing.T, sql, params, at, format string) {
		v := url.Values{"sql": {sql}, "params": {params}, "at": {at}, "format": {format}}
		var req api.QueryRequest
		req.SQL, req.At = sql, at
		if params != "" {
			req.Params = &api.Params{}
			if json.Unmarshal([]byte(params), req.Params) != nil {
				req.Params = nil
			}
		}
		for _, post := range []bool{false, true} {
			start := time.Now()
			var resp *http.Response
			if post {
				resp = fx.post(t, req, "Accept", api.ContentTypeNDJSON)
			} else {
				resp = fx.get(t, v)
			}
			body, err := io.ReadAll(resp.Body)
			took := time.Since(start)
			if took > 20*time.Second {
				t.Errorf("%q: answered after %v", sql, took)
			}
			switch {
			case resp.StatusCode >= 500:
				t.Fatalf("%q %q %q %q (post %v): %s: %s", sql, params, at, format, post, resp.Status, body)
			case resp.StatusCode == 200:
				if err != nil {
					// Cut off mid-stream: only a CSV answer is (the others end in an error).
					if resp.Header.Get("Content-Type") != api.ContentTypeCSV {
						t.Fatalf("%q: a %s answer cut off: %v", sql, resp.Header.Get("Content-Type"), err)
					}
					continue
				}
				checkAnswer(t, sql, resp.Header.Get("Content-Type"), body)
			default:
				var e api.Error
				if json.Unmarshal(body, &e) != nil || e.Message == "" || e.Kind == "" {
					t.Fatalf("%q: %s with a body that is no error: %s", sql, resp.Status, body)
				}
			}
		}
	})
	if after := fx.digest(f); after != before {
		f.Errorf("the database changed under the fuzzed queries: %s, then %s", before, after)
	}
}

// checkAnswer checks that body parses as a result of its content type.
func checkAnswer(t *testing.T, sql, ctype string, body []byte) {
	t.Helper()
	switch ctype {
	case api.ContentTypeJSON:
		var r api.QueryResult
		if err := json.Unmarshal(body, &r); err != nil || r.RowCount != len(r.Rows) {
			t.Fatalf("%q: a JSON answer that does not parse (%v) or miscounts: %.300s", sql, err, body)
		}
	case api.ContentTypeNDJSON:
		st, err := api.NewQueryStream(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%q: %v: %.300s", sql, err, body)
		}
		for {
			if _, err := st.Next(); err == io.EOF {
				break
			} else if err != nil {
				if _, ok := err.(*api.Error); ok {
					break // an error after rows: the trailer says so
				}
				t.Fatalf("%q: %v: %.300s", sql, err, body)
			}
		}
	case api.ContentTypeCSV:
		r := csv.NewReader(bytes.NewReader(body))
		r.FieldsPerRecord = -1
		if _, err := r.ReadAll(); err != nil {
			t.Fatalf("%q: CSV that does not parse: %v: %.300s", sql, err, body)
		}
	default:
		t.Fatalf("%q: an answer of type %q", sql, ctype)
	}
}

// digest reads db1's contents through the API (at the current version,
// read each time, not from the result cache), to show nothing was
// written.
func (f *queryFixture) digest(t testing.TB) string {
	var b bytes.Buffer
	for _, q := range []string{`SELECT * FROM edge ORDER BY id`, `SELECT count(*), sum(length(Text)) FROM sentences`, `SELECT count(*) FROM translations`, `SELECT * FROM pragma_integrity_check`, `SELECT name, sql FROM sqlite_schema ORDER BY name`} {
		// random() keeps the answer out of the result cache: the rows are read.
		q = "SELECT * FROM (" + q + ") WHERE random() IS NOT NULL"
		resp, err := http.Get(f.url + api.QueryPath("db1") + "?" + url.Values{"sql": {q}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&b, resp.Body)
		resp.Body.Close()
	}
	return string(b.Bytes())
}
