package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// testFrames returns a mix of frames: not found, found and empty, small,
// and (when large) contents bigger than combineMax and allocStep.
func testFrames(n int, large bool) []Frame {
	rng := rand.New(rand.NewPCG(1, 2))
	tiers := []Tier{TierMemory, TierDisk, TierPartial, TierStore}
	var fs []Frame
	for i := range n {
		f := Frame{Index: uint32(i)}
		switch i % 4 {
		case 0: // not found
		case 1: // found, empty
			f.Found, f.Tier, f.Data = true, tiers[i%len(tiers)], []byte{}
		default:
			f.Found, f.Tier = true, tiers[i%len(tiers)]
			f.Data = make([]byte, rng.IntN(300))
			for j := range f.Data {
				f.Data[j] = byte(rng.Uint32())
			}
		}
		fs = append(fs, f)
	}
	if large {
		for i, size := range []int{combineMax, combineMax + 1, allocStep + 12345, 3<<20 + 7} {
			d := make([]byte, size)
			for j := range d {
				d[j] = byte(j*31 + i)
			}
			fs = append(fs, Frame{Index: uint32(n + i), Found: true, Tier: TierStore, Data: d})
		}
	}
	// Any order is allowed: shuffle.
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	return fs
}

func encodeFrames(t testing.TB, fs []Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	for _, f := range fs {
		if err := fw.WriteFrame(f.Index, f.Found, f.Tier, f.Data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func readAll(r io.Reader) ([]Frame, error) {
	fr := NewFrameReader(r)
	var fs []Frame
	for {
		f, err := fr.Next()
		if err == io.EOF {
			return fs, nil
		}
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}

func sameFrame(a, b Frame) bool {
	return a.Index == b.Index && a.Found == b.Found && a.Tier == b.Tier && bytes.Equal(a.Data, b.Data) &&
		(a.Data == nil) == (b.Data == nil)
}

func TestFrameRoundTrip(t *testing.T) {
	want := testFrames(1000, true)
	stream := encodeFrames(t, want)
	// Through a reader that hands out a few bytes at a time, to cross every
	// buffer boundary.
	got, err := readAll(iotestOneByteish{bytes.NewReader(stream)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d frames, wrote %d", len(got), len(want))
	}
	for i := range want {
		if !sameFrame(got[i], want[i]) {
			t.Fatalf("frame %d: got index %d found %v tier %v len %d, want index %d found %v tier %v len %d",
				i, got[i].Index, got[i].Found, got[i].Tier, len(got[i].Data),
				want[i].Index, want[i].Found, want[i].Tier, len(want[i].Data))
		}
	}
}

// iotestOneByteish returns at most 7 bytes per Read.
type iotestOneByteish struct{ r io.Reader }

func (r iotestOneByteish) Read(p []byte) (int, error) {
	if len(p) > 7 {
		p = p[:7]
	}
	return r.r.Read(p)
}

func TestFrameReaderAll(t *testing.T) {
	want := testFrames(50, false)
	stream := encodeFrames(t, want)
	var got []Frame
	for f, err := range NewFrameReader(bytes.NewReader(stream)).All() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if len(got) != len(want) {
		t.Fatalf("All gave %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameFrame(got[i], want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}

	// A stream cut inside a frame: the frames before it, then its error,
	// then nothing.
	n, errs := 0, 0
	for _, err := range NewFrameReader(bytes.NewReader(stream[:len(stream)-1])).All() {
		if err != nil {
			errs++
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut stream: %v, want io.ErrUnexpectedEOF", err)
			}
			continue
		}
		if errs > 0 {
			t.Fatal("a frame after the error")
		}
		n++
	}
	if n != len(want)-1 || errs != 1 {
		t.Errorf("cut stream: %d frames and %d errors, want %d and 1", n, errs, len(want)-1)
	}

	// Breaking out early stops the iteration.
	n = 0
	for range NewFrameReader(bytes.NewReader(stream)).All() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("break after 3: %d", n)
	}
}

func TestFrameLayout(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	if err := fw.WriteFrame(0x01020304, true, TierPartial, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	// A not-found frame is written with tier 0 whatever the caller says.
	if err := fw.WriteFrame(7, false, TierDisk, nil); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		1, 2, 3, 4, 1, 3, 0, 0, 0, 3, 'a', 'b', 'c',
		0, 0, 0, 7, 0, 0, 0, 0, 0, 0,
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("got % x\nwant % x", buf.Bytes(), want)
	}
	fs, err := readAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[1].Data != nil || fs[1].Tier != TierUnspecified || fs[0].Data == nil {
		t.Fatalf("got %+v", fs)
	}
}

func TestFrameEmptyStream(t *testing.T) {
	fr := NewFrameReader(bytes.NewReader(nil))
	for range 2 {
		if _, err := fr.Next(); err != io.EOF {
			t.Fatalf("got %v, want io.EOF", err)
		}
	}
}

func TestFrameTruncatedEveryCut(t *testing.T) {
	fs := testFrames(24, false)
	stream := encodeFrames(t, fs)
	// Frame boundaries: cutting there is a clean end after that many frames.
	boundaries := map[int]int{0: 0}
	off := 0
	for i, f := range fs {
		off += FrameHeaderSize + len(f.Data)
		boundaries[off] = i + 1
	}
	for cut := 0; cut <= len(stream); cut++ {
		got, err := readAll(bytes.NewReader(stream[:cut]))
		if n, clean := boundaries[cut]; clean {
			if err != nil || len(got) != n {
				t.Fatalf("cut at %d (a frame boundary): got %d frames, %v; want %d frames and a clean end", cut, len(got), err, n)
			}
			continue
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: got %v, want an error wrapping io.ErrUnexpectedEOF", cut, err)
		}
		if !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("cut at %d: error %q does not say truncated", cut, err)
		}
		for i := range got {
			if !sameFrame(got[i], fs[i]) {
				t.Fatalf("cut at %d: frame %d before the cut differs", cut, i)
			}
		}
	}
}

func TestFrameTruncatedLarge(t *testing.T) {
	big := make([]byte, 3*allocStep+5)
	stream := encodeFrames(t, []Frame{{Index: 9, Found: true, Tier: TierDisk, Data: big}})
	for _, cut := range []int{FrameHeaderSize, FrameHeaderSize + 1, FrameHeaderSize + allocStep - 1,
		FrameHeaderSize + allocStep, FrameHeaderSize + allocStep + 1, FrameHeaderSize + 2*allocStep, len(stream) - 1} {
		_, err := readAll(bytes.NewReader(stream[:cut]))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: got %v, want io.ErrUnexpectedEOF", cut, err)
		}
		want := fmt.Sprintf("%d of %d bytes", cut-FrameHeaderSize, len(big))
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("cut at %d: error %q does not say %q", cut, err, want)
		}
	}
}

func header(index uint32, status, tier byte, length uint32) []byte {
	h := make([]byte, FrameHeaderSize)
	binary.BigEndian.PutUint32(h[0:], index)
	h[4], h[5] = status, tier
	binary.BigEndian.PutUint32(h[6:], length)
	return h
}

func TestFrameHostileLength(t *testing.T) {
	for _, length := range []uint32{MaxFrameLen + 1, 1 << 31, 0xffffffff} {
		fr := NewFrameReader(bytes.NewReader(header(3, 1, 1, length)))
		_, err := fr.Next()
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("length %d: got %v, want ErrFrameTooLarge", length, err)
		}
		// The error sticks.
		if _, err2 := fr.Next(); err2 != err {
			t.Fatalf("second Next: got %v, want %v", err2, err)
		}
	}

	// The largest allowed length, backed by only a few bytes: the reader must
	// fail without allocating anything like 64 MiB.
	stream := append(header(3, 1, 1, MaxFrameLen), "just a few bytes"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readAll(bytes.NewReader(stream))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("reading a hostile length allocated %d bytes", alloc)
	}
}

func TestFrameMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		hdr  []byte
	}{
		{"status 2", header(0, 2, 1, 0)},
		{"status 255", header(0, 255, 0, 0)},
		{"not found with length", header(0, 0, 0, 5)},
		{"not found with tier", header(0, 0, 1, 0)},
	} {
		_, err := readAll(bytes.NewReader(append(c.hdr, "hello"...)))
		if !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: got %v, want ErrBadFrame", c.name, err)
		}
	}
	// A tier this version does not know passes through.
	fs, err := readAll(bytes.NewReader(append(header(1, 1, 200, 2), "hi"...)))
	if err != nil || len(fs) != 1 || fs[0].Tier != Tier(200) || string(fs[0].Data) != "hi" {
		t.Fatalf("unknown tier: got %+v, %v", fs, err)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("connection reset")
	}
	w.n--
	return len(p), nil
}

func TestFrameWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	if err := fw.WriteFrame(0, false, 0, []byte("x")); err == nil {
		t.Fatal("not-found frame with contents: no error")
	}
	if err := fw.WriteFrame(0, true, TierStore, make([]byte, MaxFrameLen+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("contents above MaxFrameLen: got %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("refused frames wrote %d bytes", buf.Len())
	}
	// Refusals do not stick; a write error does.
	if err := fw.WriteFrame(0, true, TierMemory, []byte("ok")); err != nil {
		t.Fatal(err)
	}

	fw = NewFrameWriter(&failWriter{n: 1})
	if err := fw.WriteFrame(0, true, TierMemory, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	err := fw.WriteFrame(1, true, TierMemory, []byte("ok"))
	if err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("got %v, want the write error", err)
	}
	if err2 := fw.WriteFrame(2, false, 0, nil); err2 != err {
		t.Fatalf("after a write error: got %v, want %v", err2, err)
	}
	if err2 := fw.Flush(); err2 != err {
		t.Fatalf("Flush after a write error: got %v, want %v", err2, err)
	}

	// Large contents go in two writes; a failure of the second sticks too.
	fw = NewFrameWriter(&failWriter{n: 1})
	if err := fw.WriteFrame(0, true, TierDisk, make([]byte, combineMax+1)); err == nil {
		t.Fatal("failed contents write: no error")
	}
}

func TestFrameWriterFlush(t *testing.T) {
	// bufio.Writer: Flush pushes the frames through.
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	fw := NewFrameWriter(bw)
	if err := fw.WriteFrame(0, true, TierMemory, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatal("bufio.Writer flushed early")
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.Len() != FrameHeaderSize+1 {
		t.Fatalf("after Flush: %d bytes out", out.Len())
	}

	// http.ResponseWriter.
	rec := httptest.NewRecorder()
	fw = NewFrameWriter(rec)
	if err := fw.WriteFrame(0, false, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	if !rec.Flushed {
		t.Fatal("ResponseRecorder not flushed")
	}

	// A plain writer: nothing to do.
	if err := NewFrameWriter(io.Discard).Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestAddresses(t *testing.T) {
	var as []addr.Addr
	for i := range 50 {
		as = append(as, addr.Of([]byte{byte(i)}))
	}
	b := EncodeAddresses(as)
	if len(b) != 50*addr.Size || !bytes.Equal(b[addr.Size:2*addr.Size], as[1][:]) {
		t.Fatalf("EncodeAddresses: %d bytes", len(b))
	}
	got, err := DecodeAddresses(b)
	if err != nil || len(got) != len(as) {
		t.Fatalf("DecodeAddresses: %d, %v", len(got), err)
	}
	for i := range as {
		if got[i] != as[i] {
			t.Fatalf("address %d: got %v, want %v", i, got[i], as[i])
		}
	}
	if got, err := DecodeAddresses(nil); err != nil || len(got) != 0 {
		t.Fatalf("empty body: %v, %v", got, err)
	}
	if len(EncodeAddresses(nil)) != 0 {
		t.Fatal("EncodeAddresses(nil) not empty")
	}

	for _, n := range []int{1, 19, 21, 41, MaxBatchBody + 1} {
		_, err := DecodeAddresses(make([]byte, n))
		if !errors.Is(err, ErrBatchLength) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", n)) {
			t.Errorf("%d bytes: got %v, want ErrBatchLength naming the length", n, err)
		}
	}
	if got, err := DecodeAddresses(make([]byte, MaxBatchBody)); err != nil || len(got) != MaxBatch {
		t.Fatalf("MaxBatch addresses: %d, %v", len(got), err)
	}
	_, err = DecodeAddresses(make([]byte, MaxBatchBody+addr.Size))
	if !errors.Is(err, ErrBatchTooLarge) || !strings.Contains(err.Error(), "4097") {
		t.Fatalf("MaxBatch+1 addresses: got %v, want ErrBatchTooLarge naming the count", err)
	}
}

// zeros is an endless reader.
type zeros struct{ read int }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.read += len(p)
	return len(p), nil
}

func TestReadAddresses(t *testing.T) {
	as := []addr.Addr{addr.Of([]byte("a")), addr.Of([]byte("b"))}
	got, err := ReadAddresses(bytes.NewReader(EncodeAddresses(as)))
	if err != nil || len(got) != 2 || got[0] != as[0] || got[1] != as[1] {
		t.Fatalf("got %v, %v", got, err)
	}
	z := &zeros{}
	if _, err := ReadAddresses(z); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("endless body: got %v, want ErrBatchTooLarge", err)
	}
	if z.read > 2*MaxBatchBody {
		t.Fatalf("endless body: read %d bytes", z.read)
	}
	if _, err := ReadAddresses(bytes.NewReader(make([]byte, 30))); !errors.Is(err, ErrBatchLength) {
		t.Fatalf("30 bytes: got %v, want ErrBatchLength", err)
	}
}

func FuzzFrameReader(f *testing.F) {
	f.Add(encodeFrames(f, testFrames(8, false)))
	f.Add(encodeFrames(f, testFrames(3, false))[:25])
	f.Add(header(0, 1, 1, MaxFrameLen))
	f.Add(header(0, 1, 1, 0xffffffff))
	f.Add(header(0, 0, 0, 0))
	f.Add(header(0, 3, 0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stream []byte) {
		fr := NewFrameReader(bytes.NewReader(stream))
		var fs []Frame
		var err error
		for len(fs) <= len(stream) { // every frame takes at least 10 bytes
			var fm Frame
			if fm, err = fr.Next(); err != nil {
				break
			}
			if fm.Found != (fm.Data != nil) || len(fm.Data) > MaxFrameLen {
				t.Fatalf("frame %d: found %v with %d bytes (nil %v)", len(fs), fm.Found, len(fm.Data), fm.Data == nil)
			}
			fs = append(fs, fm)
		}
		if err == nil {
			t.Fatalf("%d frames from %d bytes and no end", len(fs), len(stream))
		}
		if err != io.EOF {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrBadFrame) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		// A stream read to a clean end is exactly the frames it held.
		if re := encodeFrames(t, fs); !bytes.Equal(re, stream) {
			t.Fatalf("re-encoding %d frames gives %d bytes, not the %d read", len(fs), len(re), len(stream))
		}
	})
}
