package doltremote_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/cache"
	"github.com/chunkd/chunkd/internal/doltfixtures"
	"github.com/chunkd/chunkd/internal/testdb"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/tablefile"
)

// known is a fixture chunk and the file holding it.
type known struct {
	doltfixtures.Chunk
	file string // as in its URL: <name> or <name>.darc
	dict bool   // compressed with an archive dictionary
}

// knownChunks returns every chunk of a fixture remote's table files.
func knownChunks(t *testing.T, fx string) []known {
	t.Helper()
	var out []known
	for _, spec := range fixtureManifest(t, fx).Specs {
		file, _ := fixtureFile(t, fx, spec.Name)
		for _, c := range doltfixtures.Chunks(t, doltfixtures.Path(fx+"/"+file)) {
			out = append(out, known{Chunk: c, file: file, dict: strings.HasPrefix(c.Codec, "zstd-dict")})
		}
	}
	return out
}

// absent are addresses no fixture holds.
var absent = []addr.Addr{addr.Of([]byte("not a chunk 1")), addr.Of([]byte("not a chunk 2"))}

// loc is one located chunk, whichever call answered.
type loc struct {
	url                  string
	off                  uint64
	n                    uint32
	dictOff              uint64
	dictLen              uint32
	refreshFile, refresh string
}

// checkLocations checks that every known chunk was located where the
// known answers say, that the dictionary span of a zstd chunk holds a
// zstd frame, that absent addresses were reported missing, and fetches
// each location's bytes over HTTP.
func checkLocations(t *testing.T, r *remote, fx string, chunks []known, got map[addr.Addr]loc, missing []addr.Addr) {
	t.Helper()
	if len(missing) != len(absent) {
		t.Errorf("missing %v, want %v", missing, absent)
	}
	for _, c := range chunks {
		l, ok := got[c.Addr]
		if !ok {
			t.Errorf("chunk %s not located", c.Addr)
			continue
		}
		if !strings.HasSuffix(l.url, "/dolt/v1/db/"+c.file) || l.off != c.Offset || l.n != c.Stored {
			t.Errorf("chunk %s at %s [%d +%d], want %s [%d +%d]", c.Addr, l.url, l.off, l.n, c.file, c.Offset, c.Stored)
			continue
		}
		if c.dict != (l.dictLen > 0) {
			t.Errorf("chunk %s (codec %s): dictionary length %d", c.Addr, c.Codec, l.dictLen)
		}
		if l.refreshFile != strings.TrimSuffix(c.file, manifest.ArchiveSuffix) {
			t.Errorf("chunk %s: refresh names file %q", c.Addr, l.refreshFile)
		}
	}
	// The bytes behind a few locations, as Dolt fetches them.
	for _, c := range chunks[:min(len(chunks), 20)] {
		l := got[c.Addr]
		_, file := fixtureFile(t, fx, strings.TrimSuffix(c.file, manifest.ArchiveSuffix))
		code, _, body := r.get(l.url, "Range", rangeOf(l.off, uint64(l.n)))
		if code != http.StatusPartialContent || !bytes.Equal(body, file[l.off:l.off+uint64(l.n)]) {
			t.Errorf("chunk %s: GET %s: %d, %d bytes", c.Addr, rangeOf(l.off, uint64(l.n)), code, len(body))
		}
		if l.dictLen > 0 {
			code, _, body := r.get(l.url, "Range", rangeOf(l.dictOff, uint64(l.dictLen)))
			if code != http.StatusPartialContent || !bytes.HasPrefix(body, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
				t.Errorf("chunk %s: dictionary span: %d, %x...", c.Addr, code, body[:min(len(body), 4)])
			}
		}
	}
}

func rangeOf(off, n uint64) string {
	return fmt.Sprintf("bytes=%d-%d", off, off+n-1)
}

func request(chunks []known) [][]byte {
	var out [][]byte
	for _, c := range chunks {
		out = append(out, c.Addr[:])
	}
	for _, a := range absent {
		out = append(out, a[:])
	}
	return out
}

func TestChunkLocations(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			r := newRemote(t, map[string]string{"db": fx}, cache.Config{})
			ctx := context.Background()
			chunks := knownChunks(t, fx)
			hashes := request(chunks)

			fromLocs := func(locs []*remotesapi.DownloadLoc) (map[addr.Addr]loc, []addr.Addr) {
				got := map[addr.Addr]loc{}
				seen := map[[20]byte]bool{}
				for _, dl := range locs {
					g := dl.GetHttpGetRange()
					for _, rc := range g.Ranges {
						a, err := addr.FromBytes(rc.Hash)
						if err != nil {
							t.Fatal(err)
						}
						seen[a] = true
						got[a] = loc{g.Url, rc.Offset, rc.Length, rc.DictionaryOffset, rc.DictionaryLength, dl.RefreshRequest.GetFileId(), ""}
					}
					if !dl.RefreshAfter.AsTime().After(time.Now()) {
						t.Errorf("refresh_after %v is not in the future", dl.RefreshAfter.AsTime())
					}
				}
				var missing []addr.Addr
				for _, h := range hashes {
					if !seen[[20]byte(h)] {
						missing = append(missing, addr.Addr(h))
					}
				}
				return got, missing
			}

			t.Run("GetDownloadLocations", func(t *testing.T) {
				resp, err := r.rpc.GetDownloadLocations(ctx, &remotesapi.GetDownloadLocsRequest{RepoPath: "db", ChunkHashes: hashes})
				if err != nil {
					t.Fatal(err)
				}
				got, missing := fromLocs(resp.Locs)
				checkLocations(t, r, fx, chunks, got, missing)
			})

			t.Run("StreamDownloadLocations", func(t *testing.T) {
				stream, err := r.rpc.StreamDownloadLocations(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Two requests on one stream, one response each, in order.
				half := len(hashes) / 2
				var locs []*remotesapi.DownloadLoc
				for _, part := range [][][]byte{hashes[:half], hashes[half:]} {
					if err := stream.Send(&remotesapi.GetDownloadLocsRequest{RepoPath: "db", ChunkHashes: part}); err != nil {
						t.Fatal(err)
					}
					resp, err := stream.Recv()
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, dl := range resp.Locs {
						n += len(dl.GetHttpGetRange().Ranges)
					}
					if want := len(part) - countAbsent(part); n != want {
						t.Errorf("a response located %d chunks, want %d", n, want)
					}
					locs = append(locs, resp.Locs...)
				}
				stream.CloseSend()
				if _, err := stream.Recv(); err != io.EOF {
					t.Errorf("stream ended with %v, want EOF", err)
				}
				got, missing := fromLocs(locs)
				checkLocations(t, r, fx, chunks, got, missing)
			})

			t.Run("StreamChunkLocations", func(t *testing.T) {
				stream, err := r.rpc.StreamChunkLocations(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := map[addr.Addr]loc{}
				var missing []addr.Addr
				files := map[uint32]*remotesapi.StreamChunkLocationsResponse_TableFileRecord{}
				introduced := 0
				for i := 0; i < len(hashes); i += 100 { // batches, as Dolt sends them
					part := hashes[i:min(i+100, len(hashes))]
					if err := stream.Send(&remotesapi.StreamChunkLocationsRequest{RepoPath: "db", ChunkHashes: bytes.Join(part, nil)}); err != nil {
						t.Fatal(err)
					}
					resp, err := stream.Recv()
					if err != nil {
						t.Fatal(err)
					}
					for _, rec := range resp.TableFiles {
						if files[rec.TableFileId] != nil {
							t.Errorf("table file id %d introduced twice", rec.TableFileId)
						}
						files[rec.TableFileId] = rec
						introduced++
					}
					for _, l := range resp.Locations {
						rec := files[l.TableFileId]
						if rec == nil {
							t.Fatalf("location names table file id %d before its record", l.TableFileId)
						}
						got[addr.Addr(part[l.RequestIndex])] = loc{rec.Url, l.Offset, l.Length, l.DictionaryOffset, l.DictionaryLength, rec.FileId, ""}
					}
					for _, i := range resp.MissingIndexes {
						missing = append(missing, addr.Addr(part[i]))
					}
				}
				stream.CloseSend()
				if _, err := stream.Recv(); err != io.EOF {
					t.Errorf("stream ended with %v, want EOF", err)
				}
				if specs := len(fixtureManifest(t, fx).Specs); introduced != specs {
					t.Errorf("%d table files introduced, want %d", introduced, specs)
				}
				checkLocations(t, r, fx, chunks, got, missing)
			})
		})
	}
}

func countAbsent(hashes [][]byte) int {
	n := 0
	for _, h := range hashes {
		for _, a := range absent {
			if bytes.Equal(h, a[:]) {
				n++
			}
		}
	}
	return n
}

func TestHasChunks(t *testing.T) {
	r := newRemote(t, map[string]string{"org/db": "remote-archive"}, cache.Config{})
	chunks := knownChunks(t, "remote-archive")
	// Absent addresses between present ones, and many of them: Dolt sends
	// up to 16384 at once.
	var hashes [][]byte
	var want []int32
	for i := 0; i < 16384; i++ {
		if i%3 == 0 {
			a := addr.Of([]byte{byte(i), byte(i >> 8), 'x'})
			hashes = append(hashes, a[:])
			want = append(want, int32(i))
		} else {
			a := chunks[i%len(chunks)].Addr
			hashes = append(hashes, a[:])
		}
	}
	resp, err := r.rpc.HasChunks(context.Background(), &remotesapi.HasChunksRequest{RepoPath: "org/db", Hashes: hashes})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Absent) != len(want) {
		t.Fatalf("%d absent, want %d", len(resp.Absent), len(want))
	}
	for i := range want {
		if resp.Absent[i] != want[i] {
			t.Fatalf("absent[%d] = %d, want %d", i, resp.Absent[i], want[i])
		}
	}
}

func TestBadRequests(t *testing.T) {
	r := newRemote(t, map[string]string{"db": "remote-classic"}, cache.Config{})
	ctx := context.Background()
	short := [][]byte{make([]byte, 20), make([]byte, 19)}
	_, err := r.rpc.HasChunks(ctx, &remotesapi.HasChunksRequest{RepoPath: "db", Hashes: short})
	wantCode(t, err, "InvalidArgument", "hash 1")
	_, err = r.rpc.GetDownloadLocations(ctx, &remotesapi.GetDownloadLocsRequest{RepoPath: "db", ChunkHashes: short})
	wantCode(t, err, "InvalidArgument", "hash 1")
	stream, err := r.rpc.StreamChunkLocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&remotesapi.StreamChunkLocationsRequest{RepoPath: "db", ChunkHashes: make([]byte, 30)})
	_, err = stream.Recv()
	wantCode(t, err, "InvalidArgument", "30 bytes, not a multiple of 20")
	_, err = r.rpc.GetDownloadLocations(ctx, &remotesapi.GetDownloadLocsRequest{RepoPath: "nodb", ChunkHashes: short[:1]})
	wantCode(t, err, "NotFound", `"nodb"`)
	_, err = r.rpc.HasChunks(ctx, &remotesapi.HasChunksRequest{RepoPath: "org/nodb", Hashes: short[:1]})
	wantCode(t, err, "NotFound", `"org/nodb"`)
}

func TestReadOnly(t *testing.T) {
	r := newRemote(t, map[string]string{"db": "remote-classic"}, cache.Config{})
	ctx := context.Background()
	id := make([]byte, 20)
	calls := map[string]func(path string) error{
		"GetUploadLocations": func(p string) error {
			_, err := r.rpc.GetUploadLocations(ctx, &remotesapi.GetUploadLocsRequest{RepoPath: p, TableFileDetails: []*remotesapi.TableFileDetails{{Id: id, ContentLength: 10, NumChunks: 1}}})
			return err
		},
		"AddTableFiles": func(p string) error {
			_, err := r.rpc.AddTableFiles(ctx, &remotesapi.AddTableFilesRequest{RepoPath: p, ChunkTableInfo: []*remotesapi.ChunkTableInfo{{Hash: id, ChunkCount: 1}}})
			return err
		},
		"Commit": func(p string) error {
			_, err := r.rpc.Commit(ctx, &remotesapi.CommitRequest{RepoPath: p, Current: id, Last: id})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			wantCode(t, call("db"), "PermissionDenied", "read-only remote")
			wantCode(t, call("nodb"), "NotFound")
		})
	}
	if _, err := r.rpc.Rebase(ctx, &remotesapi.RebaseRequest{RepoPath: "db"}); err != nil {
		t.Errorf("Rebase: %v", err)
	}
	// The store is untouched.
	m := fixtureManifest(t, "remote-classic")
	root, err := r.rpc.Root(ctx, &remotesapi.RootRequest{RepoPath: "db"})
	if err != nil || !bytes.Equal(root.RootHash, m.Root[:]) {
		t.Errorf("root after refused writes: %x %v", root.GetRootHash(), err)
	}
}

// TestNotServable: a database Dolt could not read from table files alone
// is refused, saying why.
func TestNotServable(t *testing.T) {
	r := newRemote(t, map[string]string{"local": "db-classic-noms", "sqlite": "remote-classic"}, cache.Config{})
	// Make "sqlite" a chunkd SQLite database: same files, another format.
	path := filepath.Join(r.dir, "sqlite", "manifest")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(manifest.FormatDolt), []byte(manifest.FormatChunkdSQLite), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = r.rpc.GetRepoMetadata(ctx, &remotesapi.GetRepoMetadataRequest{RepoPath: "sqlite"})
	wantCode(t, err, "FailedPrecondition", "not a Dolt database", manifest.FormatChunkdSQLite)
	_, err = r.rpc.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: "local"})
	wantCode(t, err, "FailedPrecondition", "chunk journal")
}

// TestSeesNewManifest: a push to the store is seen once the service's copy
// of the manifest is older than ManifestTTL.
func TestSeesNewManifest(t *testing.T) {
	r := newRemote(t, map[string]string{"db": "remote-classic"}, cache.Config{ManifestTTL: 20 * time.Millisecond})
	ctx := context.Background()
	classic, archive := fixtureManifest(t, "remote-classic"), fixtureManifest(t, "remote-archive")
	root := func() []byte {
		t.Helper()
		resp, err := r.rpc.Root(ctx, &remotesapi.RootRequest{RepoPath: "db"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.RootHash
	}
	if got := root(); !bytes.Equal(got, classic.Root[:]) {
		t.Fatalf("root %x, want %s", got, classic.Root)
	}
	// "Push": the archive's file, and a manifest naming it with a new root.
	copyDir(t, doltfixtures.Path("remote-archive"), filepath.Join(r.dir, "db"))
	m := *archive
	m.Root = addr.Of([]byte("a new root"))
	if err := m.Relock(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "db", "manifest"), m.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if got := root(); !bytes.Equal(got, m.Root[:]) {
		t.Fatalf("root after the push %x, want %s", got, m.Root)
	}
	list, err := r.rpc.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.TableFileInfo) != len(archive.Specs) {
		t.Fatalf("%d files listed after the push, want %d", len(list.TableFileInfo), len(archive.Specs))
	}
	for _, f := range list.TableFileInfo {
		if code, _, _ := r.get(f.Url); code != http.StatusOK {
			t.Errorf("GET %s after the push: %d", f.Url, code)
		}
	}
}

// TestCorruptStoreBytes: a chunk that does not hash to its address in the
// store never reaches a client: a response that would hold it fails with
// an error status before its first byte, or is cut short before the chunk.
func TestCorruptStoreBytes(t *testing.T) {
	r := newRemote(t, map[string]string{"db": "remote-classic"}, cache.Config{})
	name := fixtureManifest(t, "remote-classic").Specs[0].Name
	path := filepath.Join(r.dir, "db", name)
	b, tf := testdb.ReadTable(t, path)
	// Swap two records of the same length: each still decodes (and
	// passes its CRC), so only the hash check can catch them.
	entries := tf.Entries()
	// swap swaps the first two records of one length at or after from,
	// and returns the first and the end of the second.
	swap := func(from uint64) (tablefile.Entry, uint64) {
		t.Helper()
		byLen := map[uint32]tablefile.Entry{}
		for _, e := range entries {
			if e.Offset < from {
				continue
			}
			if o, ok := byLen[e.Length]; ok {
				tmp := append([]byte(nil), b[o.Offset:o.End()]...)
				copy(b[o.Offset:o.End()], b[e.Offset:e.End()])
				copy(b[e.Offset:e.End()], tmp)
				return o, e.End()
			}
			byLen[e.Length] = e
		}
		t.Fatalf("no two records of the same length after offset %d", from)
		return tablefile.Entry{}, 0
	}
	early, earlyEnd := swap(0)
	if earlyEnd > 256<<10 {
		t.Fatalf("the first swapped records end at %d, too late for this test", earlyEnd)
	}
	late, _ := swap(earlyEnd + (1 << 20) + (64 << 10)) // past the first block of a range starting after early
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	url := r.base + "/dolt/v1/db/" + name
	for _, rng := range []string{rangeOf(early.Offset, uint64(early.Length)), ""} {
		var hdr []string
		if rng != "" {
			hdr = []string{"Range", rng}
		}
		code, _, body := r.get(url, hdr...)
		if code != http.StatusInternalServerError || !strings.Contains(string(body), "hash to") {
			t.Errorf("GET %q over a corrupt chunk: %d %.200s; want 500 (the service's status for a corrupt object) saying it does not hash to its address", rng, code, body)
		}
	}
	if code, _, body := r.get(url, "Range", "bytes=0-99"); code != http.StatusPartialContent || !bytes.Equal(body, b[:100]) {
		t.Errorf("a range before the corrupt chunks: %d, %d bytes", code, len(body))
	}
	// From after the early record: the first block is good, the second
	// holds the late one.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", earlyEnd))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || err == nil || int64(len(got)) >= resp.ContentLength {
		t.Errorf("range over a corrupt chunk in its second block: %d, %d of %d bytes, err %v; want 206 and a cut transfer", resp.StatusCode, len(got), resp.ContentLength, err)
	}
	if uint64(len(got)) > late.Offset-earlyEnd {
		t.Errorf("the cut transfer reached the corrupt record (%d bytes, record at +%d)", len(got), late.Offset-earlyEnd)
	}
}

// putCRC writes the CRC-32C of rec into dst, as a record's checksum.
func putCRC(dst, rec []byte) {
	binary.BigEndian.PutUint32(dst, crc32.Checksum(rec, crc32.MakeTable(crc32.Castagnoli)))
}

// TestChangedCachedCopy: a cached file changed on disk after it was
// verified is caught by its sums when served whole, dropped, and the
// download answered with the store's proven bytes.
func TestChangedCachedCopy(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx, func(t *testing.T) {
			r := newRemote(t, map[string]string{"db": fx}, cache.Config{})
			spec := fixtureManifest(t, fx).Specs[0]
			file, want := fixtureFile(t, fx, spec.Name)
			url := r.base + "/dolt/v1/db/" + file
			if code, _, body := r.get(url); code != http.StatusOK || !bytes.Equal(body, want) {
				t.Fatalf("cold GET: %d, %d bytes", code, len(body))
			}
			waitCached(t, r, "db", spec.Name)
			var cached string
			filepath.WalkDir(r.cacheDir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && filepath.Base(p) == file && strings.Contains(p, "tables") {
					cached = p
				}
				return nil
			})
			if cached == "" {
				t.Fatalf("no cached copy of %s under %s", file, r.cacheDir)
			}
			b, err := os.ReadFile(cached)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/3] ^= 0x40 // in the data
			if err := os.WriteFile(cached, b, 0o644); err != nil {
				t.Fatal(err)
			}
			before, _ := r.st.counts()
			if code, _, body := r.get(url); code != http.StatusOK || !bytes.Equal(body, want) {
				t.Fatalf("GET after the copy changed: %d, %d bytes, equal %v", code, len(body), bytes.Equal(body, want))
			}
			if after, _ := r.st.counts(); after == before {
				t.Errorf("the changed copy was served: nothing was read from the store")
			}
		})
	}
}
