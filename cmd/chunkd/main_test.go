package main

import (
	"flag"
	"io"
	"slices"
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
