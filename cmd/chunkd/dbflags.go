package main

import (
	"context"
	"flag"

	"github.com/chunkd/chunkd/store"
)

// dbFlags are --store and --db, which name a database in a store, both
// required.
type dbFlags struct {
	store, db string
}

func (f *dbFlags) add(fs *flag.FlagSet, dbUsage string) {
	fs.StringVar(&f.store, "store", "", "object store URL (required)")
	fs.StringVar(&f.db, "db", "", dbUsage+" (required)")
}

// open checks that both flags were given and opens the store.
func (f *dbFlags) open(ctx context.Context) (store.Store, error) {
	if f.store == "" || f.db == "" {
		return nil, usagef("--store and --db are required")
	}
	return store.Open(ctx, f.store)
}
