// Package s3 is a store.Store kept in an S3 bucket (AWS S3, MinIO, or any
// other S3-compatible service), built on minio-go.
//
// It registers the "s3" scheme with store.Open:
//
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&timeout=30s
//
// Query parameters (all optional):
//
//	endpoint      service URL, such as http://127.0.0.1:9000; default: the
//	              environment's AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else
//	              the profile's endpoint_url in the AWS config file, else AWS
//	region        default: AWS_REGION or AWS_DEFAULT_REGION, else the profile's
//	              region in the AWS config file (AWS_CONFIG_FILE or
//	              ~/.aws/config, profile AWS_PROFILE); us-east-1 for a
//	              custom endpoint; looked up from the bucket on AWS
//	path_style    true or false: path-style addressing (the default when an
//	              endpoint is given) or virtual-hosted buckets
//	timeout       a limit for each operation, retries included, plus a second
//	              per MiB written or read with ReadAt (default 30s; 0 for
//	              none); Open's streams are limited until their first byte
//	retries       how often a failed request is retried with backoff (default 4)
//	access_key, secret_key, session_token
//	              credentials that override the environment (for tests)
//
// Without access_key, credentials are found the standard AWS ways: the
// variables AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN,
// then the shared credentials file (~/.aws/credentials or
// AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE), then an IAM role from
// the instance or container (unless AWS_EC2_METADATA_DISABLED=true). With
// none of those, requests are anonymous.
//
// Object versions are ETags. PutIf sends If-Match, or If-None-Match: * to
// create, so it needs a service that honours conditional writes (AWS S3
// since 2024, recent MinIO).
package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/ini.v1"

	"github.com/chunkd/chunkd/store"
)

func init() { store.Register("s3", store.OpenerOf(Open)) }

// Defaults for Config fields left zero.
const (
	DefaultTimeout = 30 * time.Second
	DefaultRetries = 4
)

// Config describes a bucket (and a prefix in it) to use as a store.
type Config struct {
	Bucket string
	// Prefix is prepended to every key; a "/" is added if it lacks one.
	Prefix string
	// Endpoint is the service's URL ("http://127.0.0.1:9000"); empty means
	// AWS S3. A URL without a scheme is taken to be https.
	Endpoint string
	// Region; empty means us-east-1 for a custom endpoint, or asking AWS.
	Region string
	// PathStyle addresses buckets as endpoint/bucket rather than as
	// bucket.endpoint.
	PathStyle bool
	// AccessKey, SecretKey and SessionToken, if AccessKey is set, are used
	// instead of the credentials from the environment.
	AccessKey, SecretKey, SessionToken string
	// Timeout limits each operation, retries included, plus a second per
	// MiB written (or read by ReadAt): zero means DefaultTimeout, negative
	// means no limit. Get's whole transfer must fit in it; Open only waits
	// for the first byte within it.
	Timeout time.Duration
	// Retries is how often a request that failed in a way worth retrying
	// is retried: zero means DefaultRetries, negative means never.
	Retries int
}

// ParseURL makes a Config from an s3:// URL (see the package comment),
// taking the endpoint and region from the environment when the URL does
// not give them.
func ParseURL(u *url.URL) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("s3 URL %s: %s", redact(u), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "s3" {
		return bad("scheme is not s3")
	}
	if u.Host == "" {
		return bad("no bucket (want s3://bucket/prefix)")
	}
	if u.User != nil {
		return bad("put credentials in access_key and secret_key parameters, not before the bucket")
	}
	cfg := Config{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("bad query: %v", err)
	}
	pathStyle := ""
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			cfg.Endpoint = v
		case "region":
			cfg.Region = v
		case "path_style":
			pathStyle = v
		case "access_key":
			cfg.AccessKey = v
		case "secret_key":
			cfg.SecretKey = v
		case "session_token":
			cfg.SessionToken = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if v == "0" {
				d, err = -1, nil
			}
			if err != nil || d == 0 {
				return bad("bad timeout %q: want a duration such as 30s, or 0 for none", v)
			}
			cfg.Timeout = d
		case "retries":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return bad("bad retries %q: want a count", v)
			}
			cfg.Retries = n
			if n == 0 {
				cfg.Retries = -1
			}
		default:
			return bad("unknown parameter %q (known: endpoint, region, path_style, timeout, retries, access_key, secret_key, session_token)", k)
		}
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if cfg.Region == "" {
		cfg.Region = firstEnv("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	if cfg.Endpoint == "" || cfg.Region == "" {
		prof := sharedConfig()
		if cfg.Endpoint == "" {
			cfg.Endpoint = prof.Key("endpoint_url").String()
		}
		if cfg.Region == "" {
			cfg.Region = prof.Key("region").String()
		}
	}
	cfg.PathStyle = cfg.Endpoint != ""
	if pathStyle != "" {
		b, err := strconv.ParseBool(pathStyle)
		if err != nil {
			return bad("bad path_style %q: want true or false", pathStyle)
		}
		cfg.PathStyle = b
	}
	if cfg.AccessKey == "" && (cfg.SecretKey != "" || cfg.SessionToken != "") {
		return bad("secret_key or session_token without access_key")
	}
	return cfg, nil
}

// sharedConfig returns the profile's section of the AWS config file
// (AWS_CONFIG_FILE, else ~/.aws/config; profile AWS_PROFILE, else
// default), or an empty section when there is none.
func sharedConfig() *ini.Section {
	empty := ini.Empty().Section("")
	path := os.Getenv("AWS_CONFIG_FILE")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return empty
		}
		path = filepath.Join(home, ".aws", "config")
	}
	f, err := ini.Load(path)
	if err != nil {
		return empty
	}
	name := "default"
	if p := os.Getenv("AWS_PROFILE"); p != "" && p != "default" {
		name = "profile " + p
	}
	if sec, err := f.GetSection(name); err == nil {
		return sec
	}
	return empty
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// redact returns u as a string without secrets, for messages.
func redact(u *url.URL) string { return store.Redact(u.String()) }

// Store is a store.Store in an S3 bucket. Its methods are safe for
// concurrent use.
type Store struct {
	core      minio.Core
	transport *http.Transport
	bucket    string
	prefix    string // "" or ends in "/"
	endpoint  string // as configured, for String
	timeout   time.Duration
	retries   int
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RangeReader = (*Store)(nil)
)

// Open makes a Store from an s3:// URL; see ParseURL. It makes no request.
func Open(_ context.Context, u *url.URL) (*Store, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// New makes a Store from a Config. It makes no request: a missing bucket or
// bad credentials show up as errors of the first operations.
func New(cfg Config) (*Store, error) {
	name := "s3://" + cfg.Bucket
	if cfg.Bucket == "" {
		return nil, errors.New("s3 store: no bucket")
	}
	s := &Store{bucket: cfg.Bucket, endpoint: cfg.Endpoint, timeout: cfg.Timeout, retries: cfg.Retries}
	if p := strings.Trim(cfg.Prefix, "/"); p != "" {
		s.prefix = p + "/"
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.retries == 0 {
		s.retries = DefaultRetries
	}
	if s.retries < 0 {
		s.retries = 0
	}

	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		e := cfg.Endpoint
		if !strings.Contains(e, "://") {
			e = "https://" + e
		}
		eu, err := url.Parse(e)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") || strings.Trim(eu.Path, "/") != "" || eu.RawQuery != "" {
			return nil, fmt.Errorf("s3 store %s: bad endpoint %q: want a URL such as http://127.0.0.1:9000", name, cfg.Endpoint)
		}
		host, secure = eu.Host, eu.Scheme == "https"
	}
	region := cfg.Region
	if region == "" && cfg.Endpoint != "" {
		region = "us-east-1"
	}

	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", name, err)
	}
	dial := 10 * time.Second
	if s.timeout > 0 && s.timeout < dial {
		dial = s.timeout
	}
	tr.DialContext = (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConnsPerHost = 64  // a cache makes many parallel ranged reads
	tr.ResponseHeaderTimeout = 0 // the per-request context bounds this
	s.transport = tr

	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	} else {
		creds = credentials.New(newEnvChain())
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    countingTransport{tr},
		Region:       region,
		BucketLookup: lookup,
		MaxRetries:   s.retries + 1, // minio-go counts attempts
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", name, err)
	}
	s.core = minio.Core{Client: client}
	return s, nil
}

// String returns the store's URL, with its endpoint but no credentials.
func (s *Store) String() string {
	str := "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
	str = strings.TrimSuffix(str, "/")
	if s.endpoint != "" {
		str += "?endpoint=" + s.endpoint // validated: no "&" or "#" in it
	}
	return str
}

// Close releases idle connections.
func (s *Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// where names an object in error messages.
func (s *Store) where(key string) string {
	return "s3://" + s.bucket + "/" + s.prefix + key
}

// object checks key and returns its object name.
func (s *Store) object(key string) (string, error) {
	if err := store.CheckKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// call is one store operation: its context, bounded by the timeout.
type call struct {
	s        *Store
	op, key  string
	parent   context.Context
	ctx      context.Context
	timeout  time.Duration // the limit of ctx, if any
	cancel   context.CancelFunc
	attempts *atomic.Int32
}

// begin checks key and starts an operation.
// The time limit grows by a second for each MiB of payload, size.
func (s *Store) begin(ctx context.Context, op, key string, size int64) (*call, string, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, "", fmt.Errorf("s3 %s: %w", op, err)
	}
	c := &call{s: s, op: op, key: key, parent: ctx, attempts: new(atomic.Int32)}
	cctx := context.WithValue(ctx, attemptsKey{}, c.attempts)
	if s.timeout > 0 {
		c.timeout = s.timeout + time.Duration(size>>20)*time.Second
		c.ctx, c.cancel = context.WithTimeout(cctx, c.timeout)
	} else {
		c.ctx, c.cancel = context.WithCancel(cctx)
	}
	return c, obj, nil
}

// fail describes err, the failure of the call, wrapping the matching store
// error.
func (c *call) fail(err error) error {
	prefix := fmt.Sprintf("s3 %s %s", c.op, c.s.where(c.key))
	var er minio.ErrorResponse
	if !errors.As(err, &er) { // no answer from the server: was the context done?
		if perr := c.parent.Err(); perr != nil {
			if errors.Is(perr, context.DeadlineExceeded) {
				return fmt.Errorf("%s: %w (%w)", prefix, store.ErrUnreachable, perr)
			}
			return fmt.Errorf("%s: %w", prefix, perr)
		}
		if c.ctx.Err() != nil && c.timeout > 0 {
			return fmt.Errorf("%s: %w: no answer within %v (%w)", prefix, store.ErrUnreachable, c.timeout, context.DeadlineExceeded)
		}
	}
	return fmt.Errorf("%s: %w", prefix, classify(err))
}

// classify wraps err in the store error it means, if any.
func classify(err error) error {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		detail := fmt.Errorf("%s, HTTP %d: %w", er.Code, er.StatusCode, err)
		switch {
		case er.Code == "NoSuchBucket":
			return fmt.Errorf("%w: bucket %q does not exist", store.ErrNotFound, er.BucketName)
		case er.Code == "NoSuchKey" || er.StatusCode == http.StatusNotFound:
			return quiet{store.ErrNotFound, err} // the server's message adds nothing
		case er.StatusCode == http.StatusForbidden || er.StatusCode == http.StatusUnauthorized,
			er.Code == "AccessDenied", er.Code == "InvalidAccessKeyId", er.Code == "SignatureDoesNotMatch",
			er.Code == "InvalidToken", er.Code == "ExpiredToken":
			return fmt.Errorf("%w (%w)", store.ErrAccessDenied, detail)
		case er.StatusCode == http.StatusPreconditionFailed:
			return fmt.Errorf("%w (%w)", store.ErrPrecondition, detail)
		case er.StatusCode == http.StatusServiceUnavailable || er.StatusCode == http.StatusBadGateway ||
			er.StatusCode == http.StatusGatewayTimeout || er.Code == "SlowDown":
			return fmt.Errorf("%w (%w)", store.ErrUnreachable, detail)
		}
		return detail
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errTransfer) {
		return fmt.Errorf("%w (%w)", store.ErrUnreachable, err)
	}
	return err
}

// quiet is an error that reads as its kind but also wraps its cause.
type quiet struct{ kind, cause error }

func (q quiet) Error() string   { return q.kind.Error() }
func (q quiet) Unwrap() []error { return []error{q.kind, q.cause} }

// errTransfer marks a response body that broke off early.
var errTransfer = errors.New("response cut short")

// attemptsKey is the context key of a call's counter of HTTP attempts.
type attemptsKey struct{}

// countingTransport counts the HTTP attempts of each call, so PutIf can
// tell whether a request may have been sent twice.
type countingTransport struct{ http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if n, ok := req.Context().Value(attemptsKey{}).(*atomic.Int32); ok {
		n.Add(1)
	}
	return t.RoundTripper.RoundTrip(req)
}

// retryBody runs fn, which makes a request and reads its body, again (with
// backoff) while it fails with a broken-off body, up to the retry limit.
func (c *call) retryBody(fn func() error) error {
	wait := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !errors.Is(err, errTransfer) || attempt >= c.s.retries || c.ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return c.ctx.Err()
		}
		wait = min(2*wait, time.Second)
	}
}

// changed explains a failed precondition of a read that was retried
// with If-Match: the object was replaced midway.
func changed(err error, etag string) error {
	var er minio.ErrorResponse
	if etag != "" && errors.As(err, &er) && er.StatusCode == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: replaced while being read (was version %s)", store.ErrPrecondition, etag)
	}
	return err
}

// readFull reads into p from a response body. Any failure is an
// errTransfer: the body ended early or the connection broke.
func readFull(body io.Reader, p []byte) (int, error) {
	n, err := io.ReadFull(body, p)
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return n, fmt.Errorf("%w after %d of %d bytes", errTransfer, n, len(p))
	}
	return n, fmt.Errorf("%w after %d of %d bytes (%w)", errTransfer, n, len(p), err)
}

// ReadAt reads len(p) bytes of key at off with one ranged GET.
func (s *Store) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	c, obj, err := s.begin(ctx, "read", key, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer c.cancel()
	if off < 0 {
		return 0, fmt.Errorf("s3 read %s: negative offset %d", s.where(key), off)
	}
	if len(p) == 0 {
		if _, err := s.core.StatObject(c.ctx, s.bucket, obj, minio.StatObjectOptions{}); err != nil {
			return 0, c.fail(err)
		}
		return 0, nil
	}
	n := 0
	short := false // the object ends before p is full
	etag := ""     // of the object, once a response has begun
	err = c.retryBody(func() error {
		start := off + int64(n)
		var opts minio.GetObjectOptions
		if err := opts.SetRange(start, off+int64(len(p))-1); err != nil {
			return err
		}
		if etag != "" {
			opts.SetMatchETag(etag) // the rest must come from the same object
		}
		body, oi, hdr, err := s.core.GetObject(c.ctx, s.bucket, obj, opts)
		if err != nil {
			var er minio.ErrorResponse
			if errors.As(err, &er) && er.StatusCode == http.StatusRequestedRangeNotSatisfiable {
				short = true // start is at or past the end
				return nil
			}
			return changed(err, etag)
		}
		defer body.Close()
		etag = oi.ETag
		total := int64(-1) // the object's size, if known
		if cr := hdr.Get("Content-Range"); cr != "" {
			// "bytes first-last/total"
			if i := strings.LastIndexByte(cr, '/'); i >= 0 {
				if t, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
					total = t
				}
			}
		} else if total = oi.Size; start > 0 {
			// The server ignored the range and sent the whole object.
			if _, err := io.CopyN(io.Discard, body, start); err != nil {
				short = errors.Is(err, io.EOF)
				if short {
					return nil
				}
				return fmt.Errorf("%w: %v", errTransfer, err)
			}
		}
		m, err := readFull(body, p[n:])
		n += m
		if errors.Is(err, errTransfer) && (total < 0 || off+int64(n) >= total) {
			short = true
			return nil
		}
		return err
	})
	if err != nil {
		return n, c.fail(err)
	}
	if short {
		return n, fmt.Errorf("s3 read %s: %d bytes at offset %d: %w", s.where(key), len(p), off, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// Get reads the whole object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	c, obj, err := s.begin(ctx, "get", key, 0)
	if err != nil {
		return nil, err
	}
	defer c.cancel()
	var data []byte
	etag := ""
	err = c.retryBody(func() error {
		var opts minio.GetObjectOptions
		if etag != "" {
			opts.SetMatchETag(etag) // a retry must not switch to a new object
		}
		body, info, _, err := s.core.GetObject(c.ctx, s.bucket, obj, opts)
		if err != nil {
			return changed(err, etag)
		}
		defer body.Close()
		etag = info.ETag
		if info.Size < 0 {
			data, err = io.ReadAll(body)
			return err
		}
		data = make([]byte, info.Size)
		_, err = readFull(body, data)
		return err
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return data, nil
}

// Open streams the object. The request's timeout bounds the wait for the
// response to start; reading the stream is bounded only by ctx.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("s3 open: %w", err)
	}
	c, body, oi, _, err := s.startGet(ctx, key, obj, minio.GetObjectOptions{}, nil)
	if err != nil {
		return nil, store.Info{}, err
	}
	return &stream{body: body, c: c}, s.info(key, oi), nil
}

// startGet sends a GET of object obj (key's) and waits for its answer to
// start, for at most the store's timeout; reading the body is bounded
// only by ctx. A failed GET ends the call; its error is special's if
// special gives one, else the call's (c.fail).
func (s *Store) startGet(ctx context.Context, key, obj string, opts minio.GetObjectOptions, special func(error) error) (*call, io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	c := &call{s: s, op: "open", key: key, parent: ctx, attempts: new(atomic.Int32)}
	c.ctx, c.cancel = context.WithCancel(ctx)
	var timedOut atomic.Bool
	var timer *time.Timer
	if s.timeout > 0 {
		timer = time.AfterFunc(s.timeout, func() {
			timedOut.Store(true)
			c.cancel()
		})
	}
	body, oi, hdr, err := s.core.GetObject(c.ctx, s.bucket, obj, opts)
	if timer != nil && !timer.Stop() && err == nil {
		body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		c.cancel()
		if timedOut.Load() {
			return nil, nil, oi, nil, fmt.Errorf("s3 open %s: %w: no answer within %v (%w)", s.where(key), store.ErrUnreachable, s.timeout, context.DeadlineExceeded)
		}
		if special != nil {
			if e := special(err); e != nil {
				return nil, nil, oi, nil, e
			}
		}
		return nil, nil, oi, nil, c.fail(err)
	}
	return c, body, oi, hdr, nil
}

// OpenRange streams n bytes of the object from off with one ranged GET
// (store.RangeReader). As with Open, the request's timeout bounds the wait
// for the response to start; reading the stream is bounded only by ctx.
// A broken-off body is not retried: the caller opens the rest again.
func (s *Store) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, fmt.Errorf("s3 open: %w", err)
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("s3 open %s: negative range [%d, +%d)", s.where(key), off, n)
	}
	what := fmt.Sprintf("s3 read %s at offset %d", s.where(key), off)
	if n == 0 {
		return store.ExactStream(io.NopCloser(strings.NewReader("")), 0, what), nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, err
	}
	c, body, _, hdr, err := s.startGet(ctx, key, obj, opts, func(err error) error {
		if er := (minio.ErrorResponse{}); errors.As(err, &er) && er.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			return fmt.Errorf("%s: the object ends before it: %w", what, io.ErrUnexpectedEOF)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if off > 0 && hdr.Get("Content-Range") == "" {
		// The server ignored the range and sends the whole object.
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			body.Close()
			c.cancel()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: the object ends before it: %w", what, io.ErrUnexpectedEOF)
			}
			return nil, c.fail(fmt.Errorf("%w: %v", errTransfer, err))
		}
	}
	return store.ExactStream(&stream{body: body, c: c}, n, what), nil
}

// ReadTail reads the last len(p) bytes of key, or all of it if it is
// shorter, with one GET of a suffix range ("bytes=-N"), and returns the
// object's size from the answer's Content-Range (store.TailReader).
func (s *Store) ReadTail(ctx context.Context, key string, p []byte) (int, int64, error) {
	obj, err := s.object(key)
	if err != nil {
		return 0, 0, fmt.Errorf("s3 read: %w", err)
	}
	if len(p) == 0 {
		info, err := s.Head(ctx, key)
		return 0, info.Size, err
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(0, -int64(len(p))); err != nil {
		return 0, 0, err
	}
	c, body, oi, hdr, err := s.startGet(ctx, key, obj, opts, func(err error) error {
		if er := (minio.ErrorResponse{}); errors.As(err, &er) && er.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			return errEmptyObject // a suffix range of an empty object
		}
		return nil
	})
	if errors.Is(err, errEmptyObject) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer c.cancel()
	defer body.Close()
	size := oi.Size // the whole object, when the server ignored the range
	if cr := hdr.Get("Content-Range"); cr != "" {
		// "bytes first-last/total"
		i := strings.LastIndexByte(cr, '/')
		t, perr := strconv.ParseInt(cr[i+1:], 10, 64)
		if i < 0 || perr != nil {
			return 0, 0, c.fail(fmt.Errorf("%w: Content-Range %q", errTransfer, cr))
		}
		size = t
	}
	n := int(min(int64(len(p)), size))
	if skip := size - int64(n); hdr.Get("Content-Range") == "" && skip > 0 {
		if _, err := io.CopyN(io.Discard, body, skip); err != nil {
			return 0, 0, c.fail(fmt.Errorf("%w: %v", errTransfer, err))
		}
	}
	m, err := readFull(body, p[:n])
	if err != nil {
		return m, size, c.fail(err)
	}
	return m, size, nil
}

// errEmptyObject: a suffix range of an empty object is not satisfiable.
var errEmptyObject = errors.New("empty object")

// stream is an object being read; closing it ends its request.
type stream struct {
	body io.ReadCloser
	c    *call
	once sync.Once
}

func (r *stream) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if err != nil && err != io.EOF {
		err = r.c.fail(err)
	}
	return n, err
}

func (r *stream) Close() error {
	var err error
	r.once.Do(func() {
		err = r.body.Close()
		r.c.cancel()
	})
	return err
}

func (s *Store) info(key string, oi minio.ObjectInfo) store.Info {
	return store.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified, Version: strings.Trim(oi.ETag, `"`)}
}

// Head returns the object's size, time and version.
func (s *Store) Head(ctx context.Context, key string) (store.Info, error) {
	c, obj, err := s.begin(ctx, "head", key, 0)
	if err != nil {
		return store.Info{}, err
	}
	defer c.cancel()
	oi, err := s.core.StatObject(c.ctx, s.bucket, obj, minio.StatObjectOptions{})
	if err != nil {
		return store.Info{}, c.fail(err)
	}
	return s.info(key, oi), nil
}

// List returns the objects whose keys start with prefix, sorted by key.
// Objects in the bucket whose names are not valid keys are skipped.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Info, error) {
	c := &call{s: s, op: "list", key: prefix, parent: ctx, attempts: new(atomic.Int32), timeout: s.timeout}
	if s.timeout > 0 {
		c.ctx, c.cancel = context.WithTimeout(ctx, s.timeout)
	} else {
		c.ctx, c.cancel = context.WithCancel(ctx)
	}
	defer c.cancel() // also stops minio-go's listing goroutine
	if !canPrefixKey(prefix) {
		return nil, nil
	}
	var infos []store.Info
	for oi := range s.core.Client.ListObjects(c.ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			return nil, c.fail(oi.Err)
		}
		key := strings.TrimPrefix(oi.Key, s.prefix)
		if store.CheckKey(key) != nil {
			continue
		}
		infos = append(infos, s.info(key, oi))
	}
	if err := c.ctx.Err(); err != nil {
		return nil, c.fail(err)
	}
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	return infos, nil
}

// canPrefixKey reports whether some valid key starts with prefix.
func canPrefixKey(prefix string) bool {
	if strings.ContainsAny(prefix, "\\\x00") {
		return false
	}
	parts := strings.Split(prefix, "/")
	for _, p := range parts[:len(parts)-1] { // all but the last are whole
		if p == "" || p == "." || p == ".." {
			return false
		}
	}
	return true
}

// Delete removes the object; a missing object is no error.
func (s *Store) Delete(ctx context.Context, key string) error {
	c, obj, err := s.begin(ctx, "delete", key, 0)
	if err != nil {
		return err
	}
	defer c.cancel()
	if err := s.core.RemoveObject(c.ctx, s.bucket, obj, minio.RemoveObjectOptions{}); err != nil {
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.Code == "NoSuchKey" {
			return nil
		}
		return c.fail(err)
	}
	return nil
}

// Put writes the object. S3 makes every PUT atomic; large objects are
// uploaded in parts.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	c, obj, err := s.begin(ctx, "put", key, int64(len(data)))
	if err != nil {
		return err
	}
	defer c.cancel()
	_, err = s.core.Client.PutObject(c.ctx, s.bucket, obj, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return c.fail(err)
	}
	return nil
}

// maxPutIf is the largest object PutIf writes: one PUT request's limit.
const maxPutIf = 5 << 30

// PutIf writes the object with one conditional PUT: If-Match: "ifVersion",
// or If-None-Match: * when ifVersion is "".
//
// If the request had to be sent more than once and the last attempt lost
// its condition, the object may hold the data of an earlier attempt whose
// answer was lost; PutIf then checks whether the object's ETag is the MD5
// of data (as S3 makes it for a single unencrypted PUT) and if so reports
// success. (So does a writer that loses to another writing the very same
// bytes, which leaves the object as it intended.)
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifVersion string) (string, error) {
	c, obj, err := s.begin(ctx, "putif", key, int64(len(data)))
	if err != nil {
		return "", err
	}
	defer c.cancel()
	if len(data) > maxPutIf {
		return "", fmt.Errorf("s3 putif %s: %d bytes is more than one PUT can write", s.where(key), len(data))
	}
	md := md5.Sum(data)
	sh := sha256.Sum256(data)
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	if ifVersion == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(ifVersion)
	}
	wait := 50 * time.Millisecond
	for conflicts := 0; ; conflicts++ {
		ui, err := s.core.PutObject(c.ctx, s.bucket, obj, bytes.NewReader(data), int64(len(data)),
			base64.StdEncoding.EncodeToString(md[:]), hex.EncodeToString(sh[:]), opts)
		if err == nil {
			return ui.ETag, nil
		}
		var er minio.ErrorResponse
		if !errors.As(err, &er) {
			return "", c.fail(err)
		}
		switch {
		case er.StatusCode == http.StatusConflict && conflicts < 10:
			// Another conditional write to the key is in flight (AWS's
			// ConditionalRequestConflict): try again once it is done.
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				return "", c.fail(c.ctx.Err())
			}
			wait = min(2*wait, time.Second)
			continue
		case er.StatusCode == http.StatusNotFound && er.Code != "NoSuchBucket":
			// If-Match on a missing object.
			return "", fmt.Errorf("s3 putif %s: %w: object does not exist, want version %s", s.where(key), store.ErrPrecondition, ifVersion)
		case er.StatusCode == http.StatusPreconditionFailed:
			if c.attempts.Load() > 1 {
				if oi, herr := s.core.StatObject(c.ctx, s.bucket, obj, minio.StatObjectOptions{}); herr == nil &&
					strings.Trim(oi.ETag, `"`) == hex.EncodeToString(md[:]) {
					return strings.Trim(oi.ETag, `"`), nil
				}
			}
			if ifVersion == "" {
				return "", fmt.Errorf("s3 putif %s: %w: object exists", s.where(key), store.ErrPrecondition)
			}
			return "", fmt.Errorf("s3 putif %s: %w: version is no longer %s", s.where(key), store.ErrPrecondition, ifVersion)
		}
		return "", c.fail(err)
	}
}
