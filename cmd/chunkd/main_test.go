package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsAnyOrder(t *testing.T) {
	for _, tc := range []struct {
		args []string
		db   string
		rest []string
	}{
		{[]string{"--db", "d", "f.sqlite"}, "d", []string{"f.sqlite"}},
		{[]string{"f.sqlite", "--db", "d"}, "d", []string{"f.sqlite"}},
		{[]string{"a", "--db", "d", "b"}, "d", []string{"a", "b"}},
		{[]string{"--db", "d", "--", "--db", "x"}, "d", []string{"--db", "x"}},
		{[]string{"a", "--", "-b"}, "", []string{"a", "-b"}},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		db := fs.String("db", "", "")
		if err := parseFlags(fs, tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if *db != tc.db || !slices.Equal(fs.Args(), tc.rest) {
			t.Errorf("%v: db %q args %q, want %q %q", tc.args, *db, fs.Args(), tc.db, tc.rest)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := parseFlags(fs, []string{"a", "--nosuch"}); err == nil {
		t.Fatal("unknown flag after an argument accepted")
	}
}

func TestRowWriter(t *testing.T) {
	cols := []string{"id", "id", "f", "t", "n"}
	rows := [][]any{{int64(1), int64(2), 1e6, []byte("a\"b"), nil}, {int64(3), int64(4), 0.5, []byte{0xff}, nil}}
	for format, want := range map[string]string{
		"json": "[\n{\"id\":1,\"id\":2,\"f\":1000000.0,\"t\":{\"blob\":\"612262\"},\"n\":null},\n{\"id\":3,\"id\":4,\"f\":0.5,\"t\":{\"blob\":\"ff\"},\"n\":null}\n]\n",
		"csv":  "id,id,f,t,n\n1,2,1000000.0,\"a\"\"b\",\n3,4,0.5,x'ff',\n",
	} {
		var b strings.Builder
		rw := newRowWriter(format, &b, cols)
		for _, r := range rows {
			if err := rw.row(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := rw.close(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("%s:\n%s\nwant\n%s", format, b.String(), want)
		}
	}
}
