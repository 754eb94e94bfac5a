package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
	"github.com/prometheus/client_golang/prometheus"
)

// statuses is the HTTP status of each kind of the cache's errors.
var statuses = map[cache.Kind]int{
	cache.KindInternal:         http.StatusInternalServerError,
	cache.KindBadRequest:       http.StatusBadRequest,
	cache.KindTooLarge:         http.StatusRequestEntityTooLarge,
	cache.KindUnknownDB:        http.StatusNotFound,
	cache.KindUnknownChunk:     http.StatusInternalServerError, // never "absent"
	cache.KindCorrupt:          http.StatusInternalServerError,
	cache.KindStoreUnreachable: http.StatusServiceUnavailable,
	cache.KindStoreDenied:      http.StatusBadGateway,
	cache.KindShuttingDown:     http.StatusServiceUnavailable,
	cache.KindCanceled:         499, // nginx's "client closed request"
	cache.KindUnknownImage:     http.StatusNotFound,
	cache.KindNotServed:        http.StatusNotImplemented,
	cache.KindUnknownFile:      http.StatusNotFound,
	cache.KindNoSuchVersion:    http.StatusNotFound,
	cache.KindVersionCollected: http.StatusGone,
}

// Status returns the HTTP status of err, by its kind (500 for errors of
// no kind).
func Status(err error) int {
	if s, ok := statuses[cache.KindOf(err)]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// WriteError answers err: its kind's status, and an api.Error body
// naming the kind.
func WriteError(w http.ResponseWriter, err error) {
	k := cache.KindOf(err)
	api.WriteErrorKind(w, Status(err), k.String(), err.Error())
}

// WriteJSON answers with v as indented JSON (the answers are small, and
// people read them with curl).
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // nothing to do if the client left
}

// WriteFrames answers with a frame stream that run writes with fw; flush
// sends what is written so far. A route's writer gives the client its
// ClientTimeout to take each part. An error means the answer began and
// failed: the caller cuts it short (panic(http.ErrAbortHandler), which
// the route's metrics count as aborted), so that the client sees a
// truncated frame stream rather than a silent partial answer.
func WriteFrames(w http.ResponseWriter, run func(fw *api.FrameWriter, flush func()) error) error {
	w.Header().Set("Content-Type", api.ContentTypeBinary)
	bw := bufio.NewWriterSize(w, 64<<10)
	fw := api.NewFrameWriter(bw)
	err := run(fw, func() {
		if bw.Flush() == nil {
			http.NewResponseController(w).Flush()
		}
	})
	if err != nil {
		return err
	}
	if err := fw.Flush(); err == nil {
		bw.Flush()
	}
	return nil
}

// WriteWhole answers with b, in parts that each get the client's timeout
// (net/http passes a large write straight to the connection); an error
// is cut short by the caller, as WriteFrames's is.
func WriteWhole(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	for len(b) > 0 {
		n := min(len(b), 256<<10)
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// deadlineWriter gives each write to the client its own deadline: the
// writer of every route but the read of one chunk.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// statusWriter remembers the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// observer counts and times the answers of one route (name) in the
// service's metrics.
type observer struct {
	a    *API
	name string
	lat  prometheus.Observer
	ok   prometheus.Counter // most answers: looked up once
}

func (a *API) observer(name string) *observer {
	return &observer{a: a, name: name, lat: a.req.Latency.WithLabelValues(name), ok: a.req.Count.WithLabelValues(name, "200")}
}

// done ends an answer begun at start, deferred by its handler: an answer
// that fails mid-stream (a client cut off, a store error after the
// headers) ends by aborting the connection, which done counts as
// "aborted" before the abort goes on.
func (o *observer) done(start time.Time, sw *statusWriter) {
	p := recover()
	o.lat.Observe(time.Since(start).Seconds())
	switch {
	case p != nil:
		o.a.req.Count.WithLabelValues(o.name, "aborted").Inc()
	case sw.code == http.StatusOK:
		o.ok.Inc()
	default:
		o.a.req.Count.WithLabelValues(o.name, strconv.Itoa(sw.code)).Inc()
	}
	if p != nil {
		panic(p)
	}
}
