package main

import (
	"slices"
	"testing"
)

func TestSplitStatements(t *testing.T) {
	for q, want := range map[string][]string{
		"SELECT 1":                                     {"SELECT 1"},
		"SELECT 1; SELECT 2;":                          {"SELECT 1", "SELECT 2"},
		" ; ;SELECT 1;;":                               {"SELECT 1"},
		"SELECT ';' AS s; SELECT 2":                    {"SELECT ';' AS s", "SELECT 2"},
		"SELECT 'it''s;' ; SELECT 2":                   {"SELECT 'it''s;'", "SELECT 2"},
		`SELECT "a;b", [c;d], ` + "`e;f`":              {`SELECT "a;b", [c;d], ` + "`e;f`"},
		"SELECT 1 -- one; two\n; SELECT 2":             {"SELECT 1 -- one; two", "SELECT 2"},
		"SELECT 1 /* a; b */; /* only; a comment */ ;": {"SELECT 1 /* a; b */"},
		"-- nothing\n":                                 nil,
		"SELECT 'unterminated;":                        {"SELECT 'unterminated;"},
	} {
		if got := splitStatements(q); !slices.Equal(got, want) {
			t.Errorf("splitStatements(%q) = %q, want %q", q, got, want)
		}
	}
}
