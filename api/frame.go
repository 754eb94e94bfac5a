package api

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"

	"github.com/chunkd/chunkd/addr"
)

// MaxBatch is the most addresses one POST /v1/dbs/{db}/chunks may ask for.
const MaxBatch = 4096

// MaxBatchBody is the largest valid batch request body: MaxBatch addresses of
// addr.Size bytes.
const MaxBatchBody = MaxBatch * addr.Size

// FrameHeaderSize is the size of a frame's header: u32 index, u8 status,
// u8 tier, u32 length.
const FrameHeaderSize = 10

// MaxFrameLen is the largest length a frame may carry (64 MiB). FrameWriter
// refuses longer contents and FrameReader rejects a longer length before it
// allocates anything for it.
const MaxFrameLen = 64 << 20

// Frame status bytes.
const (
	statusNotFound = 0
	statusFound    = 1
)

// Errors of the batch format, wrapped by the errors that name the details;
// test for them with errors.Is.
var (
	// ErrBatchLength is a batch body whose length is not a multiple of
	// addr.Size (HTTP 400).
	ErrBatchLength = errors.New("batch body length is not a multiple of the address size")
	// ErrBatchTooLarge is a batch of more than MaxBatch addresses (HTTP 413).
	ErrBatchTooLarge = errors.New("batch has more than MaxBatch addresses")
	// ErrFrameTooLarge is a frame whose length is above MaxFrameLen.
	ErrFrameTooLarge = errors.New("frame length is above MaxFrameLen")
	// ErrBadFrame is a frame header that breaks the format: a status other
	// than 0 or 1, or a not-found frame with a tier or contents.
	ErrBadFrame = errors.New("malformed frame")
)

// EncodeAddresses returns the body of a batch request: the addresses' raw
// bytes, concatenated.
func EncodeAddresses(as []addr.Addr) []byte {
	b := make([]byte, 0, len(as)*addr.Size)
	for _, a := range as {
		b = append(b, a[:]...)
	}
	return b
}

// DecodeAddresses reads the body of a batch request. It fails, wrapping
// ErrBatchLength, when the length of b is not a multiple of addr.Size, and,
// wrapping ErrBatchTooLarge, when b holds more than MaxBatch addresses. An
// empty body is an empty batch.
func DecodeAddresses(b []byte) ([]addr.Addr, error) {
	if len(b)%addr.Size != 0 {
		return nil, fmt.Errorf("batch body is %d bytes, which is not a whole number of %d-byte addresses: %w",
			len(b), addr.Size, ErrBatchLength)
	}
	n := len(b) / addr.Size
	if n > MaxBatch {
		return nil, fmt.Errorf("batch asks for %d addresses, above the limit of %d: %w", n, MaxBatch, ErrBatchTooLarge)
	}
	as := make([]addr.Addr, n)
	for i := range as {
		copy(as[i][:], b[i*addr.Size:])
	}
	return as, nil
}

// ReadAddresses reads and decodes a batch request body from r, reading at
// most one byte more than MaxBatchBody, so a huge body costs no more than a
// full batch. Its errors are those of DecodeAddresses, and r's.
func ReadAddresses(r io.Reader) ([]addr.Addr, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBatchBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading batch body: %w", err)
	}
	if len(b) > MaxBatchBody {
		return nil, fmt.Errorf("batch body is more than %d bytes, the size of %d addresses: %w",
			MaxBatchBody, MaxBatch, ErrBatchTooLarge)
	}
	return DecodeAddresses(b)
}

// Frame is one answer of a batch: the chunk at position Index of the request.
type Frame struct {
	// Index is the position of the address in the request, from 0.
	Index uint32
	// Found reports whether the database holds the chunk.
	Found bool
	// Tier is where the server found the chunk; TierUnspecified when not
	// found. FrameReader passes on tier values this version does not know.
	Tier Tier
	// Data is the chunk's uncompressed bytes: nil when not found, non-nil
	// (maybe empty) when found.
	Data []byte
}

// FrameWriter writes a batch response's frames to an io.Writer. After a
// failed write it returns that error for every later call. It buffers
// nothing itself beyond one small frame; call Flush to push what w buffers
// to the client (between groups of frames, say after the memory hits).
type FrameWriter struct {
	w   io.Writer
	buf []byte
	err error
}

// combineMax is the largest contents that WriteFrame copies next to the
// header to write both at once; larger contents get a Write of their own.
const combineMax = 16 << 10

// NewFrameWriter returns a FrameWriter writing to w, typically an
// http.ResponseWriter (whose Content-Type should be ContentTypeBinary) or a
// bufio.Writer.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// WriteFrame writes the frame for request position index. For a chunk that
// was not found, found is false, data must be empty and tier is written as 0
// whatever it is. It refuses data longer than MaxFrameLen, writing nothing.
func (fw *FrameWriter) WriteFrame(index uint32, found bool, tier Tier, data []byte) error {
	if fw.err != nil {
		return fw.err
	}
	status := byte(statusFound)
	if !found {
		if len(data) != 0 {
			return fmt.Errorf("frame for index %d: not found but has %d bytes of contents", index, len(data))
		}
		status, tier = statusNotFound, TierUnspecified
	}
	if len(data) > MaxFrameLen {
		return fmt.Errorf("frame for index %d: %d bytes of contents: %w", index, len(data), ErrFrameTooLarge)
	}
	var hdr [FrameHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[0:4], index)
	hdr[4] = status
	hdr[5] = byte(tier)
	binary.BigEndian.PutUint32(hdr[6:10], uint32(len(data)))
	var err error
	if len(data) <= combineMax {
		fw.buf = append(append(fw.buf[:0], hdr[:]...), data...)
		_, err = fw.w.Write(fw.buf)
	} else if _, err = fw.w.Write(hdr[:]); err == nil {
		_, err = fw.w.Write(data)
	}
	if err != nil {
		fw.err = fmt.Errorf("writing frame for index %d: %w", index, err)
	}
	return fw.err
}

// Flush pushes out what the underlying writer buffers: it calls Flush on an
// http.ResponseWriter (through http.ResponseController), on a writer with a
// Flush() error method such as bufio.Writer, or on an http.Flusher. It does
// nothing for other writers.
func (fw *FrameWriter) Flush() error {
	if fw.err != nil {
		return fw.err
	}
	var err error
	switch w := fw.w.(type) {
	case http.ResponseWriter:
		err = http.NewResponseController(w).Flush()
		if errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	case interface{ Flush() error }:
		err = w.Flush()
	case http.Flusher:
		w.Flush()
	}
	if err != nil {
		fw.err = fmt.Errorf("flushing frames: %w", err)
	}
	return fw.err
}

// FrameReader reads a batch response's frames.
type FrameReader struct {
	r      *bufio.Reader
	frames int // frames read so far
	err    error
}

// NewFrameReader returns a FrameReader reading from r, which it buffers.
func NewFrameReader(r io.Reader) *FrameReader {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 32<<10)
	}
	return &FrameReader{r: br}
}

// allocStep is how much Next allocates for contents before it has seen them
// arrive; beyond it, the buffer grows with the bytes actually read, so a
// length that the stream does not back costs little.
const allocStep = 256 << 10

// Next returns the next frame. At the clean end of the stream, between two
// frames, it returns io.EOF. A stream cut inside a frame is an error wrapping
// io.ErrUnexpectedEOF; a length above MaxFrameLen wraps ErrFrameTooLarge and
// a malformed header ErrBadFrame. After any error Next returns it again.
// The caller owns each Frame's Data.
func (fr *FrameReader) Next() (Frame, error) {
	if fr.err != nil {
		return Frame{}, fr.err
	}
	f, err := fr.next()
	if err != nil {
		fr.err = err
		return Frame{}, err
	}
	fr.frames++
	return f, nil
}

// Buffered returns how many bytes of the stream are read ahead, in hand:
// more than zero says the next frame has begun to arrive.
func (fr *FrameReader) Buffered() int { return fr.r.Buffered() }

// All iterates over the frames to the end of the stream: each frame with
// a nil error, and at the end nothing more, or the error that stopped it
// (as Next returns it) with a zero Frame.
func (fr *FrameReader) All() iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		for {
			f, err := fr.Next()
			if err == io.EOF || !yield(f, err) || err != nil {
				return
			}
		}
	}
}

func (fr *FrameReader) next() (Frame, error) {
	var hdr [FrameHeaderSize]byte
	n, err := io.ReadFull(fr.r, hdr[:])
	switch {
	case err == io.EOF:
		return Frame{}, io.EOF
	case err == io.ErrUnexpectedEOF:
		return Frame{}, fmt.Errorf("chunkd frame %d: truncated header, %d of %d bytes: %w",
			fr.frames, n, FrameHeaderSize, io.ErrUnexpectedEOF)
	case err != nil:
		return Frame{}, fmt.Errorf("reading chunkd frame %d: %w", fr.frames, err)
	}
	f := Frame{
		Index: binary.BigEndian.Uint32(hdr[0:4]),
		Tier:  Tier(hdr[5]),
	}
	length := binary.BigEndian.Uint32(hdr[6:10])
	switch status := hdr[4]; status {
	case statusFound:
		f.Found = true
	case statusNotFound:
		if length != 0 || f.Tier != TierUnspecified {
			return Frame{}, fmt.Errorf("chunkd frame %d (index %d): not found but has tier %d and length %d, want 0 and 0: %w",
				fr.frames, f.Index, f.Tier, length, ErrBadFrame)
		}
		return f, nil
	default:
		return Frame{}, fmt.Errorf("chunkd frame %d (index %d): status byte %d, want 0 or 1: %w",
			fr.frames, f.Index, status, ErrBadFrame)
	}
	if length > MaxFrameLen {
		return Frame{}, fmt.Errorf("chunkd frame %d (index %d): length %d is above the limit of %d: %w",
			fr.frames, f.Index, length, MaxFrameLen, ErrFrameTooLarge)
	}
	data, err := readContents(fr.r, int(length))
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Frame{}, fmt.Errorf("chunkd frame %d (index %d): truncated contents, %d of %d bytes: %w",
				fr.frames, f.Index, len(data), length, io.ErrUnexpectedEOF)
		}
		return Frame{}, fmt.Errorf("reading chunkd frame %d (index %d): %w", fr.frames, f.Index, err)
	}
	f.Data = data
	return f, nil
}

// readContents reads exactly n bytes from r, growing its buffer as the bytes
// arrive rather than trusting n up front. On error it returns what it read.
func readContents(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, min(n, allocStep))
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		if err != nil {
			return buf[:got], err
		}
		if got == n {
			return buf, nil
		}
		next := make([]byte, min(n, 2*len(buf)))
		copy(next, buf)
		buf = next
	}
}
