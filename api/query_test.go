package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValueJSON(t *testing.T) {
	for _, tc := range []struct {
		v    Value
		json string
	}{
		{Value{}, `null`},
		{IntValue(0), `0`},
		{IntValue(-42), `-42`},
		{IntValue(maxSafeInt), `9007199254740991`},
		{IntValue(-maxSafeInt), `-9007199254740991`},
		{IntValue(maxSafeInt + 1), `{"int":"9007199254740992"}`},
		{IntValue(math.MaxInt64), `{"int":"9223372036854775807"}`},
		{IntValue(math.MinInt64), `{"int":"-9223372036854775808"}`},
		{RealValue(0), `0.0`},
		{RealValue(1), `1.0`},
		{RealValue(-2.5), `-2.5`},
		{RealValue(0.1), `0.1`},
		{RealValue(1e15), `1.0e+15`},
		{RealValue(123456789012345), `123456789012345.0`},
		{RealValue(1e-7), `1.0e-07`},
		{RealValue(1.5e300), `1.5e+300`},
		{RealValue(math.Inf(1)), `{"real":"Infinity"}`},
		{RealValue(math.Inf(-1)), `{"real":"-Infinity"}`},
		{TextValue(""), `""`},
		{TextValue("a\"b\\c\nd\x00e\u2028é世🌍"), `"a\"b\\c\nd\u0000e\u2028é世🌍"`},
		{TextValue("\xffA"), `{"text":"/0E="}`},
		{BlobValue([]byte{}), `{"blob":""}`},
		{BlobValue([]byte{0, 0xff, 0x10}), `{"blob":"AP8Q"}`},
	} {
		got := string(AppendValueJSON(nil, tc.v))
		if got != tc.json {
			t.Errorf("%+v: %s, want %s", tc.v, got, tc.json)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s is not valid JSON", got)
		}
		var back Value
		if err := json.Unmarshal([]byte(got), &back); err != nil || !back.Equal(tc.v) {
			t.Errorf("%s read back as %+v (%v), want %+v", got, back, err, tc.v)
		}
	}
	for _, bad := range []string{`true`, `[1]`, `{"int":1}`, `{"x":"1"}`, `{"blob":"***"}`, `99999999999999999999`, `{"int":"1","blob":""}`} {
		var v Value
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s read as %+v, want an error", bad, v)
		}
	}
}

func TestParams(t *testing.T) {
	var r QueryRequest
	if err := json.Unmarshal([]byte(`{"sql":"x","params":[1,"a",null,1.5,{"blob":"AA=="}]}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Params == nil || len(r.Params.List) != 5 || !r.Params.List[0].Equal(IntValue(1)) || !r.Params.List[3].Equal(RealValue(1.5)) || r.Params.List[4].Type != SQLBlob {
		t.Errorf("positional params %+v", r.Params)
	}
	if err := json.Unmarshal([]byte(`{"sql":"x","params":{"id":7,":name":"n"}}`), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Params.Named) != 2 || !r.Params.Named["id"].Equal(IntValue(7)) || r.Params.List != nil {
		t.Errorf("named params %+v", r.Params)
	}
	if err := json.Unmarshal([]byte(`{"sql":"x","params":3}`), &r); err == nil {
		t.Error("params 3 accepted")
	}
	b, _ := json.Marshal(QueryRequest{SQL: "s", Params: &Params{List: []Value{IntValue(1), TextValue("")}}})
	if string(b) != `{"sql":"s","params":[1,""]}` {
		t.Errorf("marshalled %s", b)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\/", "\x00\x1f\x7f", "é世🌍", "\u2028\u2029", "<>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		b := AppendJSONString(nil, []byte(s))
		var back string
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("%q encoded as %s, read back %q (%v)", s, b, back, err)
		}
	})
}

func FuzzAppendReal(f *testing.F) {
	for _, x := range []float64{0, 1, -1, 0.1, 1e15, 1e-4, 9.999e-5, 1e300, 5e-324, math.MaxFloat64, 123456.789} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		s := string(AppendReal([]byte("x"), x))[1:]
		if !strings.ContainsAny(s, ".e") {
			t.Fatalf("%v written %s: no '.' nor exponent", x, s)
		}
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != x {
			t.Fatalf("%v written %s, read back %v (%v)", x, s, back, err)
		}
		var v Value
		if err := json.Unmarshal([]byte(s), &v); err != nil || v.Type != SQLReal || v.Real != x {
			t.Fatalf("%s read as %+v (%v)", s, v, err)
		}
	})
}

func TestCSV(t *testing.T) {
	vals := []Value{{}, TextValue(""), IntValue(-3), RealValue(2), TextValue(`a,"b"` + "\nc"), BlobValue([]byte{1, 0xab}), TextValue("plain"), RealValue(math.Inf(-1))}
	var b []byte
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendCSVValue(b, v)
	}
	if want := `,"",-3,2.0,"a,""b""` + "\nc\",x'01ab',plain,-Inf"; string(b) != want {
		t.Errorf("CSV %q, want %q", b, want)
	}
	rec, err := csv.NewReader(bytes.NewReader(append(b, '\n'))).Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != len(vals) || rec[1] != "" || rec[4] != "a,\"b\"\nc" {
		t.Errorf("read back %q", rec)
	}
}

func TestQueryStream(t *testing.T) {
	in := `{"root":"r","columns":[{"name":"a","type":"INTEGER"}]}
[1]
[{"int":"9223372036854775807"}]
{"row_count":2,"truncated":true}
`
	s, err := NewQueryStream(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Root != "r" || len(s.Header.Columns) != 1 || s.Header.Columns[0].Type != "INTEGER" {
		t.Errorf("header %+v", s.Header)
	}
	var got []int64
	for {
		row, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, row[0].Int)
	}
	if len(got) != 2 || got[1] != math.MaxInt64 || !s.Trailer.Truncated {
		t.Errorf("rows %v, trailer %+v", got, s.Trailer)
	}
	// Cut short, and ended by an error.
	s, _ = NewQueryStream(strings.NewReader(`{"root":"r","columns":[]}` + "\n[]\n"))
	s.Next()
	if _, err := s.Next(); err == nil || err == io.EOF {
		t.Errorf("a stream without its trailer: %v", err)
	}
	s, _ = NewQueryStream(strings.NewReader(`{"root":"r","columns":[]}` + "\n" + `{"row_count":0,"truncated":false,"error":{"error":"query timeout","kind":"query timeout"}}` + "\n"))
	_, err = s.Next()
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindQueryTimeout {
		t.Errorf("a stream ended by an error: %v", err)
	}
}
