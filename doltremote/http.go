package doltremote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/manifest"
)

func (s *Service) download(w http.ResponseWriter, r *http.Request) {
	code := "aborted" // until a status is chosen
	defer func(start time.Time) { s.metrics.observe("download", code, time.Since(start)) }(time.Now())
	fail := func(status int, format string, args ...any) {
		code = strconv.Itoa(status)
		api.WriteError(w, status, fmt.Sprintf(format, args...))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		fail(http.StatusMethodNotAllowed, "read-only remote: %s is not allowed, only GET and HEAD", r.Method)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 {
		fail(http.StatusNotFound, "no such download %s: want %s{db}/{table file}", r.URL.Path, PathPrefix)
		return
	}
	db, name := rest[:i], strings.TrimSuffix(rest[i+1:], manifest.ArchiveSuffix)
	if _, err := addr.Parse(name); err != nil {
		fail(http.StatusBadRequest, "table file name %q: %v", rest[i+1:], err)
		return
	}
	if err := s.checkSignature(r); err != nil {
		fail(http.StatusForbidden, "%v", err)
		return
	}
	f, err := s.c.OpenFile(r.Context(), db, name)
	if err != nil {
		fail(httpStatus(err), "%v", err)
		return
	}
	size := f.Size()
	off, n, ranged, ok := parseRange(r.Header.Get("Range"), size)
	h := w.Header()
	if !ok {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		fail(http.StatusRequestedRangeNotSatisfiable, "range %q is outside the file's %d bytes", r.Header.Get("Range"), size)
		return
	}
	h.Set("Content-Type", api.ContentTypeBinary)
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if ranged {
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size))
	}
	if r.Method == http.MethodHead {
		code = strconv.Itoa(status)
		w.WriteHeader(status)
		return
	}
	bw := &bodyWriter{w: w, status: status}
	st, err := f.Copy(r.Context(), bw, off, n)
	s.metrics.served(st)
	switch {
	case err == nil:
		code = strconv.Itoa(status)
	case errors.Is(r.Context().Err(), context.Canceled):
		code = "client_gone"
	case !bw.started:
		h.Del("Content-Range")
		h.Del("Accept-Ranges")
		fail(httpStatus(err), "%v", err)
	default:
		// The headers are gone: cut the body short, so the client sees a
		// failed transfer rather than a short file.
		s.log.Error("download failed mid-body", "db", db, "file", name, "offset", off, "length", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// bodyWriter sends the response's status with its first byte, so a copy
// that fails before sending any can still answer with an error status.
type bodyWriter struct {
	w       http.ResponseWriter
	status  int
	started bool
}

func (b *bodyWriter) Write(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.w.WriteHeader(b.status)
	}
	return b.w.Write(p)
}

// parseRange reads a Range header for a file of size bytes and returns the
// bytes to send. ranged is false for the whole file (no header, or one
// this server ignores: not "bytes", malformed, or several ranges); ok is
// false when the range is unsatisfiable (a 416).
func parseRange(h string, size int64) (off, n int64, ranged, ok bool) {
	spec, isBytes := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if h == "" || !isBytes || strings.Contains(spec, ",") {
		return 0, size, false, true
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, size, false, true
	}
	if first == "" { // the last n bytes
		k, err := strconv.ParseInt(last, 10, 64)
		if err != nil || k < 0 {
			return 0, size, false, true
		}
		if k == 0 || size == 0 {
			return 0, 0, false, false
		}
		k = min(k, size)
		return size - k, k, true, true
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, size, false, true
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, size, false, true
		}
		b = min(b, size-1)
	}
	if a >= size {
		return 0, 0, false, false
	}
	return a, b - a + 1, true, true
}
