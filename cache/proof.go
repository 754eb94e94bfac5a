package cache

import (
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/tablefile"
)

// How a download proves its blocks, each once, and how readers read the
// proven ones.
//
// A block is proven when every unit in it is: a chunk's record or span by
// decoding it and hashing the chunk to its address; an archive dictionary
// by decoding, with it, a chunk compressed with it and hashing that; the
// index region by its SHA-256 against the index the service serves (so
// every offset the service reads the file at is the verified one). An
// archive span no chunk refers to cannot be proven: it is accepted into
// the file, as a whole-file verification would, but never served from a
// download in flight. The CRC-32C of each archive span is recorded as it
// is proven: those are the file's sums (tablefile.Sums) once it is
// committed, and what reads of the download check meanwhile.
//
// Reads of proven blocks check what a cached file's reads check: a
// classic record's own CRC, an archive span's CRC against the one
// recorded, the index region's SHA-256. A chunk decoded from a proven
// block is not hashed again.

// castagnoli is the CRC-32C table (archive spans; classic records carry
// their own).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// spanSum is one archive span's CRC-32C, recorded by a proof.
type spanSum struct {
	span, crc uint32
}

// prove proves units [k0, k1) (dl.m.units), whose bytes buf holds from
// offset lo, but those already proven (dl.done, as it was when called),
// and returns the CRC-32C of the archive spans it proved. A failure is an
// ErrCorrupt: the store's copy is wrong.
func (dl *download) prove(buf []byte, lo int64, k0, k1 int) ([]spanSum, error) {
	t := dl.t
	dl.mu.Lock()
	skip := slices.Clone(dl.unitDone[k0:k1])
	dl.mu.Unlock()
	var sums []spanSum
	chunks := batches.Get().(*chunkBatch)
	defer batches.Put(chunks)
	chunks.units, chunks.data = chunks.units[:0], chunks.data[:0] // a failed proof leaves some
	for k, u := range dl.m.units[k0:k1] {
		if skip[k] {
			continue
		}
		b := buf[int64(u.Offset)-lo : int64(u.End())-lo]
		switch u.Kind {
		case tablefile.UnitChunk:
			t.env.metrics.proofs.Inc()
			if err := chunks.add(dl.view, u, b); err != nil {
				t.env.metrics.proofFailures.Inc()
				return nil, err
			}
			if chunks.full() {
				if err := chunks.check(t.env.metrics); err != nil {
					return nil, err
				}
			}
		case tablefile.UnitDict:
			if err := dl.proveDict(u, b, buf, lo); err != nil {
				return nil, err
			}
		case tablefile.UnitIndex:
			checked, err := t.idx.CheckUnit(u, b)
			if err == nil && !checked {
				err = &tablefile.CorruptError{Offset: int64(u.Offset), Reason: "the index region cannot be checked: the service's index was opened without its hash"}
			}
			if err != nil {
				return nil, err
			}
		case tablefile.UnitOther:
			// Accepted unproven, never served before the file is committed.
		}
		if u.Span != 0 {
			sums = append(sums, spanSum{u.Span, crc32.Checksum(b, castagnoli)})
		}
	}
	if err := chunks.check(t.env.metrics); err != nil {
		return nil, err
	}
	return sums, nil
}

// chunkBatch holds chunks decoded for a proof until they are hashed
// together: addr.OfAll hashes several chunks at once, faster a byte than
// one at a time. Its decode buffers are reused from batch to batch and,
// through batches, from proof to proof.
type chunkBatch struct {
	units []tablefile.Unit
	data  [][]byte
	bufs  [][]byte // the decode buffer of each slot
	sums  []addr.Addr
}

// batches holds chunkBatches between proofs.
var batches = sync.Pool{New: func() any { return new(chunkBatch) }}

// batchChunks is how many chunks a proof hashes at once.
const batchChunks = 32

// add decodes chunk unit u (its stored bytes b) into the batch.
func (c *chunkBatch) add(view *tablefile.Table, u tablefile.Unit, b []byte) error {
	i := len(c.units)
	if i == len(c.bufs) {
		c.bufs = append(c.bufs, nil)
	}
	data, err := view.DecodeTo(c.bufs[i], u.Entry, b)
	if err != nil {
		return err
	}
	c.bufs[i] = data[:cap(data)]
	c.units = append(c.units, u)
	c.data = append(c.data, data)
	return nil
}

func (c *chunkBatch) full() bool { return len(c.units) == batchChunks }

// check hashes the batch's chunks, each against its address, and empties
// the batch.
func (c *chunkBatch) check(m *metrics) error {
	n := len(c.units)
	if n == 0 {
		return nil
	}
	c.sums = slices.Grow(c.sums[:0], n)[:n]
	addr.OfAll(c.data, c.sums)
	for i, u := range c.units {
		if c.sums[i] != u.Entry.Addr {
			m.proofFailures.Inc()
			return &tablefile.CorruptError{Offset: int64(u.Offset), Addr: u.Entry.Addr.String(), Reason: "contents hash to " + c.sums[i].String()}
		}
	}
	c.units, c.data = c.units[:0], c.data[:0]
	return nil
}

// proveDict proves dictionary span u (bytes b) by decoding, with it, the
// chunk u names (from buf, which holds the file from lo, when it has it;
// else the download's file or the store) and hashing the chunk.
func (dl *download) proveDict(u tablefile.Unit, b, buf []byte, lo int64) error {
	t := dl.t
	e := u.Entry
	var stored []byte
	if int64(e.Offset) >= lo && int64(e.End()) <= lo+int64(len(buf)) {
		stored = buf[int64(e.Offset)-lo : int64(e.End())-lo]
	} else {
		stored = make([]byte, e.Length)
		if _, err := (downloadSource{dl}).ReadAt(stored, int64(e.Offset)); err != nil {
			return storeErr(err, "read chunk %s of %s to prove its dictionary", e.Addr, t.key)
		}
	}
	return t.proveDictWith(u, b, stored)
}

// proveDictWith proves dictionary span u, whose bytes are b, by decoding
// with it the stored bytes of the chunk it names and hashing the chunk.
func (t *table) proveDictWith(u tablefile.Unit, b, stored []byte) error {
	e := u.Entry
	t.env.metrics.proofs.Inc()
	v, err := t.idx.View(spanReader{off: int64(u.Offset), b: b}, nil)
	if err != nil {
		return err
	}
	data, err := v.Decode(e, stored)
	if err == nil {
		if got := addr.Of(data); got != e.Addr {
			err = &tablefile.CorruptError{Offset: int64(e.Offset), Addr: e.Addr.String(), Reason: "decoded with the dictionary at " + fmt.Sprint(u.Offset) + ", contents hash to " + got.String()}
		}
	}
	if err != nil {
		t.env.metrics.proofFailures.Inc()
		return fmt.Errorf("dictionary span %d: %w", u.Span, err)
	}
	return nil
}

// readChunk reads chunk e, whose blocks are written, from the download's
// file and decodes it: decodeOrProve.
func (dl *download) readChunk(e tablefile.Entry) ([]byte, error) {
	stored := make([]byte, e.Length)
	if _, err := dl.f.ReadAt(stored, int64(e.Offset)); err != nil {
		return nil, err
	}
	dl.t.env.metrics.diskReads.Inc()
	data, err := dl.decodeOrProve([]tablefile.Entry{e}, [][]byte{stored})
	if err != nil {
		return nil, err
	}
	return data[0], nil
}

// decodeOrProve decodes chunks es from their stored bytes, read from the
// download's file: each checked as a cached file's chunks are when its
// unit is proven (decode); else proven, once (decoded and hashed to its
// address, those chunks together: addr.OfAll), and recorded so when the
// chunk is its unit's whole extent (a classic record, an archive chunk's
// span). A chunk that fails its proof fails the download: the store's
// copy is corrupt.
func (dl *download) decodeOrProve(es []tablefile.Entry, stored [][]byte) ([][]byte, error) {
	t := dl.t
	out := make([][]byte, len(es))
	units := make([]int, len(es)) // each chunk's unit if it is its unit's whole extent, else -1
	var unproven []int
	for i, e := range es {
		k, k1 := dl.m.unitsOverlapping(int64(e.Offset), int64(e.End()))
		units[i] = -1
		if k1 == k+1 && dl.m.units[k].Kind == tablefile.UnitChunk && dl.m.units[k].Offset == e.Offset && dl.m.units[k].Length == uint64(e.Length) {
			units[i] = k
			dl.mu.Lock()
			done := dl.unitDone[k]
			dl.mu.Unlock()
			if done {
				data, err := dl.decode(e, stored[i])
				if err != nil {
					return nil, err
				}
				out[i] = data
				continue
			}
		}
		t.env.metrics.proofs.Inc()
		data, err := dl.view.Decode(e, stored[i])
		if err != nil {
			return nil, dl.proofFailed(err)
		}
		out[i] = data
		unproven = append(unproven, i)
	}
	if len(unproven) == 0 {
		return out, nil
	}
	data := make([][]byte, len(unproven))
	for j, i := range unproven {
		data[j] = out[i]
	}
	sums := make([]addr.Addr, len(unproven))
	addr.OfAll(data, sums)
	for j, i := range unproven {
		if e := es[i]; sums[j] != e.Addr {
			return nil, dl.proofFailed(&tablefile.CorruptError{Offset: int64(e.Offset), Addr: e.Addr.String(), Reason: "contents hash to " + sums[j].String()})
		}
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, i := range unproven {
		k := units[i]
		if k < 0 {
			continue // proven for this read; its unit is proven with its block
		}
		var sums []spanSum
		if u := dl.m.units[k]; u.Span != 0 {
			sums = []spanSum{{u.Span, crc32.Checksum(stored[i], castagnoli)}}
		}
		dl.markProven(k, k+1, sums)
	}
	dl.wake()
	return out, nil
}

// proofFailed fails the download with err, a chunk that failed its
// proof: the store's copy is corrupt.
func (dl *download) proofFailed(err error) error {
	dl.t.env.metrics.proofFailures.Inc()
	dl.fail(err)
	return dl.t.corruptInStore(err)
}

// decode checks and decodes chunk e's stored bytes, read from proven
// blocks of the download's file.
func (dl *download) decode(e tablefile.Entry, stored []byte) ([]byte, error) {
	if err := dl.checkSpan(e.Span, int64(e.Offset), stored); err != nil {
		return nil, err
	}
	return dl.view.Decode(e, stored) // a classic record's CRC; an archive's dictionary proven with the block
}

// checkSpan checks archive span id's bytes against the CRC recorded when
// it was proven (classic files: nothing to check here).
func (dl *download) checkSpan(id uint32, off int64, b []byte) error {
	if dl.spanCRC == nil || id == 0 {
		return nil
	}
	dl.mu.Lock()
	want := dl.spanCRC[id-1]
	dl.mu.Unlock()
	if got := crc32.Checksum(b, castagnoli); got != want {
		return &tablefile.CorruptError{Offset: off, Reason: fmt.Sprintf("byte span %d of the download has CRC-32C %08x; when proven it had %08x", id, got, want)}
	}
	return nil
}

// checkUnits checks units (buf holds the file from offset lo) read from
// proven blocks of the download's file, for a whole-file reader. A span
// no chunk refers to is refused: it was never proven.
func (dl *download) checkUnits(buf []byte, lo int64, units []tablefile.Unit) error {
	t := dl.t
	for _, u := range units {
		b := buf[int64(u.Offset)-lo : int64(u.End())-lo]
		switch {
		case u.Kind == tablefile.UnitOther:
			return &tablefile.CorruptError{Offset: int64(u.Offset), Reason: "nothing proves this span: no chunk refers to it"}
		case u.Span != 0 && dl.spanCRC != nil:
			if err := dl.checkSpan(u.Span, int64(u.Offset), b); err != nil {
				return err
			}
		default: // a classic record (its CRC), the index region (its SHA-256)
			checked, err := t.idx.CheckUnit(u, b)
			if err != nil {
				return err
			}
			if !checked {
				return &tablefile.CorruptError{Offset: int64(u.Offset), Reason: "nothing checks this unit"}
			}
		}
	}
	return nil
}
