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
// from the service's download of the file, as its bytes arrive (the copy
// starts ranged reads of the 16 MiB ahead of it), or read through from the
// store. With tokens, download URLs are signed (Config.SignKey) and others
// refused.
//
// # What is verified where
//
// Nothing leaves unproven (cache.FileReader.Copy): each block of a
// download is widened to whole units (records, archive spans, the index
// region) and every unit is proven before any byte of the block is sent.
// From the service's verified copy on disk, records and spans are checked
// by CRC-32C against the copy's sums and the index region by SHA-256.
// From the store, every chunk is decoded and hashed to its address, every
// archive dictionary is proven by decoding a chunk compressed with it, and
// the index region is hashed against the index the service opened; the
// service's download of a file proves its bytes so, once each, as they
// arrive, and they are then checked as the copy on disk's are (records by
// their CRC-32C, spans against the CRCs their proofs recorded, the index
// region by SHA-256). A unit that fails from the store fails the
// response: an error status before the first byte, a cut transfer after
// (the client never sees a wrong chunk or a short file). Dolt itself
// checks the CRC of snappy records, not the hashes of fetched chunks.
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
