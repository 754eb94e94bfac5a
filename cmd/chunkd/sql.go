package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/sqlitevfs"
	"github.com/chunkd/chunkd/store"
)

// sqlCommand runs a query on a SQLite database in a store, read through
// the client tiers, or on a plain local file (the baseline).
type sqlCommand struct{ cmdBase }

const sqlUsage = `sql (--db NAME (--store URL | --service ADDR | both) [--at ROOT|TIME] | --file FILE.sqlite | --db NAME --service URL --remote [--at ROOT]) -q SQL [--format table|csv|json]`

// tierFlags are the client-tier flags shared by the reading commands.
type tierFlags struct {
	store, db, at, service string
	serviceDir             string
	serviceAuth            serviceAuthFlags
	mem                    sizeFlag
	serviceTimeout         time.Duration
	readAhead              int
	fresh                  bool
}

func (c *sqlCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("sql", sqlUsage, c.stderr)
	var tf tierFlags
	fs.StringVar(&tf.store, "store", "", "object store URL holding the database (optional with --service: then the service is the only tier)")
	fs.StringVar(&tf.db, "db", "", "database name in the store")
	fs.StringVar(&tf.at, "at", "", "read this version instead of the latest: a root from 'chunkd log', or a time (2026-11-28T10:00:00Z: the newest version at or before it)")
	fs.StringVar(&tf.service, "service", "", "cache service: http://127.0.0.1:9460 or grpc://127.0.0.1:9461 (default: none, read the store directly)")
	tf.mem = sizeFlag(256 << 20)
	fs.Var(&tf.mem, "mem", "in-process memory cache for chunks")
	fs.StringVar(&tf.serviceDir, "service-dir", "", "the service's --cache-dir, read directly (page images, verified files); by default found by itself when the service runs on this host; none: never")
	fs.DurationVar(&tf.serviceTimeout, "service-timeout", 0, "wait this long for the service before also asking the store (default 50ms)")
	fs.BoolVar(&tf.fresh, "fresh", false, "with --service: have the service check the store's manifest before it gives the root (default: a root at most its --manifest-ttl old)")
	tf.serviceAuth.add(fs)
	fs.IntVar(&tf.readAhead, "read-ahead", 64, "pages fetched in one batch when SQLite reads sequentially (0: off)")
	file := fs.String("file", "", "query a plain local SQLite file instead (same engine, same output)")
	query := fs.String("q", "", "the SQL query (required)")
	format := fs.String("format", "table", "output: table, csv or json; each prints rows as they come (table sets its columns' widths by the first 100 rows, then widens)")
	remote := fs.Bool("remote", false, "run the query on the service, next to the pages (its query API), rather than in this process: needs --service http(s)://… and --db")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q (the query goes after -q)", fs.Args())
	}
	if *query == "" {
		return usagef("-q is required")
	}
	if *format != "table" && *format != "csv" && *format != "json" {
		return usagef("--format must be table, csv or json, not %q", *format)
	}
	if (*file == "") == (tf.store == "" && tf.service == "") {
		return usagef("give either --db with --store, --service or both, or --file")
	}
	start := time.Now()
	if *remote {
		if *file != "" {
			return usagef("--remote runs the query on a service: not with --file")
		}
		r, err := newSQLRemote(tf)
		if err != nil {
			return err
		}
		rows, err := r.run(ctx, *query, *format, c.stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stderr, "%d rows in %v; %s\n", rows, time.Since(start).Round(time.Millisecond), r.summary())
		return nil
	}
	var (
		db  *openDB
		err error
	)
	if *file != "" {
		db, err = openLocalSQLite(*file)
	} else {
		db, err = openStoreSQLite(ctx, tf)
	}
	if err != nil {
		return err
	}
	defer db.close()
	rows, err := db.run(ctx, *query, *format, c.stdout)
	if err != nil {
		return err
	}
	took := time.Since(start).Round(time.Millisecond)
	if jsonLogs() {
		slog.Info("query done", "rows", rows, "took", took, "tiers", db.stats())
	} else {
		fmt.Fprintf(c.stderr, "%s in %v; %s\n", count(int64(rows), "row"), took, db.stats())
	}
	return nil
}

// openDB is a SQLite database opened through the chunkd VFS, with what
// was opened for it.
type openDB struct {
	*sqlitevfs.DB
	cleanup []func()
	stats   func() string
	client  *client.Client // nil for a local file
}

func (d *openDB) close() {
	if d.DB != nil {
		d.DB.Close()
	}
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
}

// openLocalSQLite opens a plain file read-only through the same VFS and
// engine as the store path, so the two differ only in where pages come
// from. A file with unfinished writes beside it is refused.
func openLocalSQLite(path string) (*openDB, error) {
	db, err := sqlitevfs.OpenFile(path, nil)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return &openDB{DB: db, stats: func() string { return "local file " + path }}, nil
}

// openStoreSQLite opens a version of a database in a store (the head, or
// --at) through a new client.
func openStoreSQLite(ctx context.Context, tf tierFlags) (*openDB, error) {
	if tf.db == "" {
		return nil, usagef("--db is required with --store or --service")
	}
	at, err := sqlchunks.ParseAt(tf.at)
	if err != nil {
		return nil, usagef("--at: %v", err)
	}
	d := &openDB{}
	var st store.Store // none: the service is the only tier
	if tf.store != "" {
		if st, err = store.Open(ctx, tf.store); err != nil {
			return nil, err
		}
		d.cleanup = append(d.cleanup, func() { st.Close() })
	}
	src := sqlchunks.Source{Store: st, DB: tf.db, Service: tf.service, ServiceDir: tf.serviceDir, At: at,
		FreshRoot: tf.fresh, MemBytes: int64(tf.mem), ServiceTimeout: tf.serviceTimeout}
	tf.serviceAuth.applySource(&src)
	v, err := sqlchunks.Open(ctx, src)
	if err != nil {
		d.close()
		return nil, err
	}
	d.cleanup = append(d.cleanup, func() { v.Close() })
	d.stats = func() string { return v.Client.Stats().String() }
	d.client = v.Client
	ra := tf.readAhead
	if ra == 0 {
		ra = -1 // the flag's 0 means off; the package's 0 means its default
	}
	if d.DB, err = v.DB(&sqlitevfs.Options{ReadAhead: ra}); err != nil {
		d.close()
		return nil, err
	}
	d.SetMaxOpenConns(1)
	return d, nil
}

// run runs every statement of q in turn and writes each one's rows to w
// in format (a table, CSV or JSON array per statement, as sqlite3 does);
// it returns the row count of them all.
func (d *openDB) run(ctx context.Context, q, format string, w io.Writer) (int, error) {
	return runStatements(ctx, q, format, w, d.runOne)
}

// runStatements runs every statement of q in turn with runOne, a blank
// line between tables, and names the statement that failed.
func runStatements(ctx context.Context, q, format string, w io.Writer, runOne func(ctx context.Context, stmt, format string, w io.Writer) (int, error)) (int, error) {
	stmts := splitStatements(q)
	if len(stmts) == 0 {
		return 0, usagef("-q holds no SQL statement")
	}
	total := 0
	for i, stmt := range stmts {
		if i > 0 && format == "table" {
			fmt.Fprintln(w)
		}
		n, err := runOne(ctx, stmt, format, w)
		total += n
		if err != nil {
			if len(stmts) > 1 {
				return total, fmt.Errorf("statement %d of %d: %w", i+1, len(stmts), err)
			}
			return total, err
		}
	}
	return total, nil
}

// runOne runs one statement and writes its rows.
func (d *openDB) runOne(ctx context.Context, q, format string, w io.Writer) (int, error) {
	// The values as SQLite holds them (sqlitevfs.DB.Each), as the sqlite3
	// shell prints them: database/sql would turn a DATE column's text into
	// a time (the zero time when it does not parse) and a BOOLEAN's
	// integer into true or false.
	var out rowWriter
	var vals []any
	n := 0
	err := d.Each(ctx, q, nil, func(cols []sqlitevfs.Column) error {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.Name
		}
		out = newRowWriter(format, w, names)
		vals = make([]any, len(cols))
		return nil
	}, func(vs []sqlitevfs.Value) error {
		for i, v := range vs {
			vals[i] = goValue(v)
		}
		n++
		return out.row(vals)
	})
	if err != nil {
		if out != nil {
			out.flush() // the rows that came before it failed (or was interrupted)
		}
		return n, d.QueryError(err)
	}
	return n, out.close()
}

// goValue is a value as the output formats take it: int64, float64,
// string (TEXT), []byte (BLOB, a copy) or nil.
func goValue(v sqlitevfs.Value) any {
	switch v.Type {
	case sqlitevfs.Integer:
		return v.Int
	case sqlitevfs.Float:
		return v.Float
	case sqlitevfs.Text:
		return string(v.Bytes)
	case sqlitevfs.Blob:
		return bytes.Clone(v.Bytes)
	}
	return nil
}
