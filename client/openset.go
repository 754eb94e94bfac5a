package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
)

// ReadOpenSet asks the cache service (over HTTP) for the open set of a
// chunkd SQLite version (api.PatternOpenSet; the zero root: the current
// one, checked first with Options.FreshRoot; without page 1 and the
// interior pages unless pages), in one request, and returns
// the version's root and the set's chunks in order. The chunks are not
// checked here: the caller (sqlchunks) checks each against the address it
// expects as it opens the version from them. It makes the client a
// sqlchunks.SetReader.
func (c *Client) ReadOpenSet(ctx context.Context, root addr.Addr, pages bool) (addr.Addr, [][]byte, error) {
	h, ok := httpOf(c.svc)
	if !ok || !c.backoff.allow() {
		return addr.Addr{}, nil, fmt.Errorf("client: no HTTP cache service to ask for an open set")
	}
	start := time.Now()
	defer func() { c.ctr.svcTime.Add(int64(time.Since(start))) }()
	c.ctr.svcRequests.Add(1)
	fresh := root.IsEmpty() && c.opts.FreshRoot
	req, err := h.newRequest(ctx, http.MethodGet, api.OpenSetPath(h.db, root, fresh, pages), nil)
	if err != nil {
		return addr.Addr{}, nil, err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return addr.Addr{}, nil, fmt.Errorf("cache service %s: %w", h.base, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return addr.Addr{}, nil, fmt.Errorf("cache service %s: open set: %w", h.base, api.ReadError(resp))
	}
	got, err := addr.Parse(resp.Header.Get(api.HeaderRoot))
	if err != nil || (!root.IsEmpty() && got != root) {
		return addr.Addr{}, nil, fmt.Errorf("cache service %s: open set of version %q, asked for %s", h.base, resp.Header.Get(api.HeaderRoot), root)
	}
	if _, stale, _ := api.RootFreshness(resp.Header); fresh && stale {
		return addr.Addr{}, nil, errStaleRoot(h.base, h.db)
	}
	var chunks [][]byte
	for f, err := range api.NewFrameReader(resp.Body).All() {
		if err != nil {
			return addr.Addr{}, nil, fmt.Errorf("cache service %s: open set cut short after %d chunks: %w", h.base, len(chunks), err)
		}
		if int(f.Index) != len(chunks) || !f.Found {
			return addr.Addr{}, nil, fmt.Errorf("cache service %s: open set frame %d out of order", h.base, f.Index)
		}
		chunks = append(chunks, f.Data)
		c.ctr.service(f.Tier, len(f.Data))
	}
	return got, chunks, nil
}
