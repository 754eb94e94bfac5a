package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlchunks"
)

// sqlRemote runs chunkd sql's statements on a service, through its query
// API (sql --remote), and prints their rows as the local path does.
type sqlRemote struct {
	base, db, at, token string
	fresh               bool
	hc                  *http.Client
	// root and cache are the last answer's version and result-cache
	// state, for the summary.
	root, cache string
	truncated   bool
}

func newSQLRemote(tf tierFlags) (*sqlRemote, error) {
	u, err := url.Parse(tf.service)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usagef("--remote: --service %q: the query API is HTTP: want http://host:port or https://host:port", tf.service)
	}
	if tf.db == "" {
		return nil, usagef("--db is required with --remote")
	}
	if tf.store != "" || tf.serviceDir != "" {
		return nil, usagef("--remote runs the query on the service: --store and --service-dir do not apply")
	}
	if at, err := sqlchunks.ParseAt(tf.at); err != nil {
		return nil, usagef("--at: %v", err)
	} else if !at.IsHead() && !at.IsRoot {
		return nil, usagef("--remote takes --at ROOT, not a time (chunkd log --at %s names the version then)", tf.at)
	}
	tr := &http.Transport{Proxy: nil}
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = client.TLSConfig(tf.serviceAuth.caFile, tf.serviceAuth.cert, tf.serviceAuth.key); err != nil {
			return nil, err
		}
	}
	return &sqlRemote{base: strings.TrimSuffix(tf.service, "/"), db: tf.db, at: tf.at, fresh: tf.fresh, token: tf.serviceAuth.bearer(), hc: &http.Client{Transport: tr}}, nil
}

// run runs every statement of q in turn, as openDB.run does.
func (r *sqlRemote) run(ctx context.Context, q, format string, w io.Writer) (int, error) {
	return runStatements(ctx, q, format, w, r.runOne)
}

// runOne posts one statement and writes its rows as they arrive.
func (r *sqlRemote) runOne(ctx context.Context, stmt, format string, w io.Writer) (int, error) {
	body, _ := json.Marshal(api.QueryRequest{SQL: stmt, At: r.at, Fresh: r.fresh})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+api.QueryPath(r.db), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", api.ContentTypeJSON)
	req.Header.Set("Accept", api.ContentTypeNDJSON)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := api.ReadError(resp)
		if e.SQLite != nil && e.SQLite.Offset != nil {
			e.Message += fmt.Sprintf(" (at offset %d of the statement)", *e.SQLite.Offset)
		}
		return 0, e
	}
	st, err := api.NewQueryStream(resp.Body)
	if err != nil {
		return 0, err
	}
	r.root, r.cache = st.Header.Root, resp.Header.Get(api.HeaderResultCache)
	cols := make([]string, len(st.Header.Columns))
	for i, c := range st.Header.Columns {
		cols[i] = c.Name
	}
	out := newRowWriter(format, w, cols)
	vals := make([]any, len(cols))
	n := 0
	for {
		row, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			out.flush() // the rows that came before it failed, as the local path prints them
			return n, err
		}
		for i, v := range row {
			vals[i] = localValue(v)
		}
		if err := out.row(vals); err != nil {
			return n, err
		}
		n++
	}
	r.truncated = r.truncated || st.Trailer.Truncated
	return n, out.close()
}

// localValue is v as the local path's driver gives it: nil, int64,
// float64, string for TEXT, []byte for a BLOB.
func localValue(v api.Value) any {
	switch v.Type {
	case api.SQLInteger:
		return v.Int
	case api.SQLReal:
		return v.Real
	case api.SQLText:
		return string(v.Bytes)
	case api.SQLBlob:
		return v.Bytes
	}
	return nil
}

// summary says where the rows came from.
func (r *sqlRemote) summary() string {
	s := fmt.Sprintf("on the service %s, version %s, result cache %s", r.base, r.root, r.cache)
	if r.truncated {
		s += "; truncated: the service stopped at its row or byte limit (--query-max-rows, --query-max-bytes), more rows follow"
	}
	return s
}
