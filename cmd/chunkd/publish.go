package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chunkd/chunkd/internal/prom"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// publishCommand follows a SQLite database that another process writes
// and publishes a version after its commits.
type publishCommand struct{ cmdBase }

func (c *publishCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("publish", "publish --store URL --db NAME --watch FILE [--interval 1s] [--metrics ADDR]", c.stderr)
	var d dbFlags
	d.add(fs, "database name in the store")
	watch := fs.String("watch", "", "the SQLite database file to follow (required): another process writes it, in WAL or rollback-journal mode")
	interval := fs.Duration("interval", sqlchunks.DefaultPublishInterval, "publish at most one version per interval")
	message := fs.String("message", "chunkd publish", "the message recorded with each version")
	appendix := fs.Bool("appendix", true, "keep an appendix (see chunkd import)")
	threshold := fs.Float64("appendix-threshold", sqlchunks.DefaultAppendixThreshold, "rewrite the appendix past this fraction of pages it lacks (see chunkd import)")
	metrics := fs.String("metrics", "", "serve Prometheus metrics (lag, versions, bytes) at http://ADDR/metrics, e.g. 127.0.0.1:9470 (default: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *watch == "" {
		return usagef("--watch FILE is required")
	}
	if *interval <= 0 {
		return usagef("--interval must be positive")
	}
	if *threshold <= 0 || *threshold > 1 {
		return usagef("--appendix-threshold must be a fraction above 0 and at most 1, not %g", *threshold)
	}
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := sqlchunks.NewPublisher(st, sqlchunks.PublishOptions{
		DB: d.db, Path: *watch, Interval: *interval, Message: *message, Appendix: *appendix, AppendixThreshold: *threshold,
	})
	if err != nil {
		return err
	}
	if *metrics != "" {
		stop, err := servePublishMetrics(*metrics, p)
		if err != nil {
			return err
		}
		defer stop()
	}
	slog.Info("publishing", "file", *watch, "db", d.db, "store", store.Redact(st.String()), "interval", *interval)
	start := time.Now()
	err = p.Run(ctx)
	s := p.Stats()
	fmt.Fprintf(c.stdout, "published %d versions of %s as database %q in %s (%d rounds found it unchanged, %d failed), %d bytes written; last version %s; ran %v\n",
		s.Versions, *watch, d.db, store.Redact(st.String()), s.Unchanged, s.Failed, s.StoreBytes, rootText(s.Head), time.Since(start).Round(time.Millisecond))
	return err
}

// servePublishMetrics serves the publisher's metrics at addr until stop.
func servePublishMetrics(addr string, p *sqlchunks.Publisher) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	r := prom.Registry{Registerer: reg}
	stat := func(fn func(sqlchunks.PublishStats) float64) func() float64 {
		return func() float64 { return fn(p.Stats()) }
	}
	r.GaugeFunc("chunkd_publish_lag_seconds", "How long a change seen in the database has waited to be published (0: none waits).",
		stat(func(s sqlchunks.PublishStats) float64 { return s.Behind.Seconds() }))
	r.GaugeFunc("chunkd_publish_last_lag_seconds", "The last version's lag: from the change seen to the manifest naming it.",
		stat(func(s sqlchunks.PublishStats) float64 { return s.LastLag.Seconds() }))
	r.GaugeFunc("chunkd_publish_versions", "Versions published.", stat(func(s sqlchunks.PublishStats) float64 { return float64(s.Versions) }))
	r.GaugeFunc("chunkd_publish_unchanged_rounds", "Rounds that found the database unchanged.", stat(func(s sqlchunks.PublishStats) float64 { return float64(s.Unchanged) }))
	r.GaugeFunc("chunkd_publish_failed_rounds", "Rounds that failed (and were tried again).", stat(func(s sqlchunks.PublishStats) float64 { return float64(s.Failed) }))
	r.GaugeFunc("chunkd_publish_store_bytes", "Bytes the versions put to the store.", stat(func(s sqlchunks.PublishStats) float64 { return float64(s.StoreBytes) }))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("metrics server stopped", "err", err)
		}
	}()
	return func() { srv.Close() }, nil
}
