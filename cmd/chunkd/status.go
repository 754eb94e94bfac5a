package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/client"
	"github.com/dustin/go-humanize"
)

// statusCommand shows a running service's state, or waits for it to be
// ready.
type statusCommand struct{ cmdBase }

func (c *statusCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("status", "status [--service URL] [--ready [--wait D]]", c.stderr)
	service := fs.String("service", "http://127.0.0.1:9460", "the service's HTTP address (https:// with TLS)")
	ready := fs.Bool("ready", false, "only check /readyz: exit 0 when the service is ready, 1 when not")
	wait := fs.Duration("wait", 0, "with --ready: keep asking until the service is ready or this much time has passed")
	var sa serviceAuthFlags
	sa.add(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	sc, err := newStatusClient(*service, sa)
	if err != nil {
		return err
	}
	if *ready {
		return sc.waitReady(ctx, *wait, c.stdout)
	}
	if *wait != 0 {
		return usagef("--wait goes with --ready")
	}
	return sc.show(ctx, c.stdout)
}

// statusClient asks one service's HTTP API.
type statusClient struct {
	base  string
	token string
	hc    *http.Client
}

func newStatusClient(service string, sa serviceAuthFlags) (*statusClient, error) {
	u, err := url.Parse(service)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usagef("--service %q: want http://host:port or https://host:port", service)
	}
	tr := &http.Transport{Proxy: nil}
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = client.TLSConfig(sa.caFile, sa.cert, sa.key); err != nil {
			return nil, err
		}
	}
	return &statusClient{base: strings.TrimSuffix(service, "/"), token: sa.bearer(), hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

// get fetches path; a status other than 200 is an error with the
// service's message.
func (s *statusClient) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %w", s.base, path, api.ReadError(resp))
	}
	if into == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("%s%s: %w", s.base, path, err)
	}
	return nil
}

// waitReady asks /readyz every 200 ms until it answers 200 or wait has
// passed.
func (s *statusClient) waitReady(ctx context.Context, wait time.Duration, w io.Writer) error {
	deadline := time.Now().Add(wait)
	for {
		err := s.get(ctx, "/readyz", nil)
		if err == nil {
			fmt.Fprintf(w, "%s is ready\n", s.base)
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not ready: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// show prints the service's state: GET /v1/cache and /v1/dbs, for people.
func (s *statusClient) show(ctx context.Context, w io.Writer) error {
	ready := "ready"
	if err := s.get(ctx, "/readyz", nil); err != nil {
		ready = "not ready: " + err.Error()
	}
	var sum api.CacheSummary
	if err := s.get(ctx, api.CachePath, &sum); err != nil {
		return err
	}
	var dbs []api.DBSummary
	if err := s.get(ctx, api.DBsPath, &dbs); err != nil {
		return err
	}
	size := func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
	pct := func(n, of int64) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
	}
	fmt.Fprintf(w, "service   %s (%s)\n", s.base, ready)
	fmt.Fprintf(w, "memory    %s of %s (%s), %s\n", size(sum.Memory.Used), size(sum.Memory.Budget), pct(sum.Memory.Used, sum.Memory.Budget), count(int64(sum.Memory.Chunks), "chunk"))
	fmt.Fprintf(w, "disk      %s of %s (%s), %s\n", size(sum.Disk.Used), size(sum.Disk.Budget), pct(sum.Disk.Used, sum.Disk.Budget), count(int64(sum.Disk.Files), "file"))
	t := sum.Served
	fmt.Fprintf(w, "served    %s: memory %s, disk %s, partial %s, store %s; hit ratio %s\n", count(int64(t.Total()), "chunk"),
		pct(t.Memory, t.Total()), pct(t.Disk, t.Total()), pct(t.Partial, t.Total()), pct(t.Store, t.Total()), pct(t.Total()-t.Store, t.Total()))
	fmt.Fprintf(w, "downloads %d in flight (%s written)\n", sum.Downloads, size(sum.DownloadedBytes))
	fmt.Fprintf(w, "store     %s, %s read in all (downloads included)\n", count(int64(sum.StoreReads), "ranged read"), size(sum.StoreBytes))
	fmt.Fprintln(w)
	if len(dbs) == 0 {
		fmt.Fprintln(w, "no databases yet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tSTATE\tFILES CACHED\tBYTES CACHED\tDOWNLOADING\tCHUNKS SERVED\tHIT RATIO")
	for _, d := range dbs {
		files, bytes := fmt.Sprintf("%d of %d", d.FilesCached, d.Files), fmt.Sprintf("%s of %s", size(d.BytesCached), size(d.Bytes))
		if d.State == api.DBOnDisk {
			files, bytes = fmt.Sprintf("%d", d.FilesCached), size(d.BytesCached)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", d.Name, d.State, files, bytes, d.Downloading, d.Served.Total(), pct(d.Served.Total()-d.Served.Store, d.Served.Total()))
	}
	return tw.Flush()
}
