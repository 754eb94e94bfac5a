// Package doltremote makes the cache service a read-only, caching Dolt
// remote for every database in its store: dolt clone, dolt fetch, dolt pull
// and read replicas read through chunkd, and a fleet of them in one place
// reads each table file from the object store once.
//
// A Dolt remote kept in S3 or a folder (a manifest and table files) is a
// chunkd database as it is. Dolt reads a remote through two protocols:
//
//   - the gRPC service dolt.services.remotesapi.v1alpha1.ChunkStoreService
//     (package api/remotesapi): the repository's metadata, its root, its
//     table files, and where each chunk is (a URL and a byte range);
//   - plain HTTP GETs of those URLs: whole table files (clone) and Range
//     requests for the chunks it needs (fetch, pull).
//
// Service implements the first, registered on the service's gRPC server
// (Register), and Handler the second, under PathPrefix on its HTTP
// listener; download URLs name that listener.
//
// # Repositories
//
// A Dolt client names a remote http://HOST:PORT/ORG/REPO, HOST:PORT being
// the gRPC listener. ORG/REPO names the database ORG/REPO of the store (the
// folder ORG/REPO holding its manifest), or, where that does not exist, the
// database REPO. A one-segment path names that database. So
//
//	dolt clone http://127.0.0.1:9461/org/mydb
//
// clones the store's database org/mydb, or mydb.
//
// # Downloads
//
//	GET /dolt/v1/{db}/{name}        a classic table file
//	GET /dolt/v1/{db}/{name}.darc   an archive
//
// answer 200 with the whole file, or 206 with one range for a Range header
// "bytes=FIRST-LAST" (also "FIRST-" and "-SUFFIX"); an unsatisfiable range
// is a 416, and a Range header naming several ranges is ignored (200). The
// bytes come from the service's verified copy on disk when it has one; else
// from the part of a download in flight that has arrived, or read through
// from the store while the file downloads in the background.
//
// # What is verified where
//
// A copy on the service's disk was checked whole before it was kept: index,
// every record's CRC (or zstd frame), every chunk's address. Bytes served
// before the copy is complete (from a download in flight or read through)
// are checked per chunk: each chunk record the response covers is read
// whole, decoded and hashed before any byte of it is sent, and a record
// that fails from the store fails the response (the client sees a cut
// transfer, never a wrong chunk). The bytes of such a response that are not
// chunk records (a file's index and footer, archive dictionaries) pass as
// the store has them. Dolt checks what it reads too: the CRC of snappy
// records as it reads them, and the address of every chunk it writes to
// its own store on fetch and pull.
//
// # Read only
//
// The write calls (GetUploadLocations, AddTableFiles, Commit) answer
// PERMISSION_DENIED, "read-only remote", which Dolt reports without
// retrying. Rebase only re-reads the manifest if it is stale.
//
// # Caveats
//
// A database whose manifest names a chunk journal (a copied local Dolt
// database rather than a remote) or whose storage format is not Dolt's
// (chunkd's SQLite databases) is refused with FAILED_PRECONDITION: its data
// is not all in table files Dolt could read. The service sees a push to the
// store within --manifest-ttl: Root and ListTableFiles re-read a manifest
// older than that.
package doltremote
