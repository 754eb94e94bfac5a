// Package api defines the wire formats that chunkd's server and clients
// share: the HTTP API below, and (in package chunkpb) the gRPC service
// chunkd.v1.ChunkCache, which offers the same three operations.
//
// A chunk is named by its address: 20 bytes, written in URLs as 32 characters
// of 0-9a-v (see package addr). It belongs to a database, named by {db} in
// the paths below (path-escaped, as DBPath does).
//
// # One chunk
//
//	GET /v1/dbs/{db}/chunks/{address}
//
// answers 200 with the chunk's uncompressed bytes as the body,
// Content-Type application/octet-stream, and a Chunkd-Tier header saying where
// the server found the chunk: memory, disk (a cached table file), partial (a
// table file still being downloaded) or store (the remote object store). It
// answers 404 when the database does not hold the chunk (or is unknown; the
// error message says which), and 400 when {address} is not 32 characters of
// 0-9a-v:
//
//	curl -sS -D - -o chunk.bin http://127.0.0.1:9460/v1/dbs/mydb/chunks/0f1e2d3c4b5a69788796a5b4c3d2e1f0
//
// # Many chunks
//
//	POST /v1/dbs/{db}/chunks
//
// takes a body of concatenated raw 20-byte addresses (Content-Type
// application/octet-stream; no separators, so the body's length is 20 times
// the count), at most MaxBatch (4096) of them; duplicates are allowed. A body
// whose length is not a multiple of 20 is a 400, and one of more than MaxBatch
// addresses a 413.
//
// The 200 response (Content-Type application/octet-stream) is a stream of
// frames, exactly one per requested address, in ANY order: the server sends
// chunks as it finds them, those in memory first. Each frame says which
// request position it answers. A frame is, big-endian:
//
//	u32 index   position of the address in the request, from 0
//	u8  status  0 = not found, 1 = found
//	u8  tier    where it was found (the Tier values: 1 memory, 2 disk,
//	            3 partial, 4 store); 0 when not found
//	u32 length  number of bytes that follow; 0 when not found
//	    bytes   the chunk's uncompressed bytes
//
// so 10 bytes of header, then the chunk. No length is above MaxFrameLen
// (64 MiB). The stream ends after the last frame; a stream that ends early
// (fewer frames than addresses, or a frame cut short) means the server failed
// after it had sent the 200, and the missing chunks should be asked for again.
// FrameWriter writes this stream and FrameReader reads it; EncodeAddresses
// and DecodeAddresses (or ReadAddresses) make and read the request body.
//
// With curl, given a file addrs.bin of raw addresses:
//
//	curl -sS --data-binary @addrs.bin -H 'Content-Type: application/octet-stream' \
//	    -o frames.bin http://127.0.0.1:9460/v1/dbs/mydb/chunks
//
// # A database
//
//	GET /v1/dbs/{db}
//
// answers 200 with a JSON DBInfo: the database's name, its root address, and
// each table file of its manifest with its size, chunk count, whether it is
// an appendix, and its state in this cache (remote, downloading or cached,
// with the bytes downloaded so far):
//
//	curl -sS http://127.0.0.1:9460/v1/dbs/mydb
//	{"name":"mydb","root":"…","tables":[{"name":"…","size":1048576,"chunks":812,"appendix":false,"state":"cached","downloaded":1048576}]}
//
// # Errors
//
// Any answer other than 200 carries a JSON body {"error": "message"} (the
// Error type; WriteError writes one, ReadError reads one) with
// Content-Type application/json. The codes: 400 for a malformed request, 404
// for an unknown database or an absent chunk, 413 for a batch above MaxBatch,
// 5xx when the server or its object store failed.
package api
