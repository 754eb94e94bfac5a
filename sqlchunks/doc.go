// Package sqlchunks keeps SQLite databases in an object store as
// versioned, content-addressed chunks, and reads them back in place.
//
// Import publishes a database file as a new version: every page a chunk,
// a page map listing them, and a root chunk naming the map and the
// version before (the layout is drawn in format.go). Log lists the
// versions; OpenVersion opens one read-only through the VFS of package
// sqlitevfs, its pages (Pages) read through a ChunkReader - a
// *client.Client, which reads through chunkd's tiers (memory, cache
// service, store) and checks every chunk against its address.
//
// The package reaches chunks only through ChunkReader, declared here with
// what it needs; it writes through package store and manifest.
package sqlchunks
