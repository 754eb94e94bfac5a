// Command bindbench times the seed query and an aggregate on one SQLite
// file through one of three Go SQLite bindings, each with its own default
// VFS: the measurement behind chunkd's choice of mattn/go-sqlite3 (see
// docs/sql.md). It is its own module, so the main module does not depend
// on the other bindings. Build one binary per binding and run them one
// after another on the same file:
//
//	for b in mattn modernc ncruces; do go build -tags $b -o /tmp/bind-$b . && /tmp/bind-$b -db FILE; done
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"
)

const seed = `SELECT Text FROM translations JOIN sentences ON translations.TranslationId = sentences.SentenceId WHERE translations.SentenceID % 5000 = 0`
const agg = `SELECT Lang, count(*) FROM sentences GROUP BY Lang`

func main() {
	path := flag.String("db", "", "SQLite file")
	runs := flag.Int("runs", 5, "runs per binding and query (median reported)")
	flag.Parse()
	drivers := []struct{ name, driver, dsn string }{{binding, driverName, "file:" + *path + "?mode=ro"}}
	for _, d := range drivers {
		var times [2][]time.Duration
		for run := 0; run < *runs; run++ {
			for qi, q := range []string{seed, agg} {
				db, err := sql.Open(d.driver, d.dsn)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				start := time.Now()
				rows, err := db.Query(q)
				if err != nil {
					fmt.Fprintln(os.Stderr, d.name, err)
					os.Exit(1)
				}
				n := 0
				for rows.Next() {
					var a, b any
					if qi == 0 {
						rows.Scan(&a)
					} else {
						rows.Scan(&a, &b)
					}
					n++
				}
				rows.Close()
				times[qi] = append(times[qi], time.Since(start))
				db.Close()
			}
		}
		med := func(x []time.Duration) time.Duration {
			sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
			return x[len(x)/2]
		}
		fmt.Printf("| %s | %v | %v |\n", d.name, med(times[0]).Round(100*time.Microsecond), med(times[1]).Round(100*time.Microsecond))
	}
}
