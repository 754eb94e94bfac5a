package main

import (
	"fmt"

	"github.com/dustin/go-humanize/english"
)

// count writes n and noun, singular for one: "1 row", "2 rows".
func count(n int64, noun string) string {
	return fmt.Sprintf("%d %s", n, english.PluralWord(int(n), noun, ""))
}
