package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkd/chunkd/bench"
)

// TestHelpListsEverySuite: -h lists every registered suite with its
// synopsis (chunkd -h once listed them by hand and left clone out).
func TestHelpListsEverySuite(t *testing.T) {
	suites := bench.Suites()
	if len(suites) < 7 {
		t.Fatalf("%d suites registered", len(suites))
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"sql", "-h"}} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Errorf("%q exited %d", args, code)
		}
		help := stderr.String()
		for _, s := range append(suites, fakeNamed("clone")) {
			if !strings.Contains(help, "  "+s.Name()+" ") {
				t.Errorf("%q does not list suite %s:\n%s", args, s.Name(), help)
			}
		}
		for _, s := range suites {
			if !strings.Contains(help, s.Synopsis()) {
				t.Errorf("%q lacks %s's synopsis", args, s.Name())
			}
		}
		for _, flag := range []string{"-out", "-scale", "-binary", "-paths"} {
			if !strings.Contains(help, flag) {
				t.Errorf("%q does not list %s", args, flag)
			}
		}
	}
	var stdout, stderr strings.Builder
	if code := run(context.Background(), nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "  clone ") {
		t.Errorf("no arguments: exit %d, want 2 and the usage:\n%s", code, stderr.String())
	}
}

// fakeNamed is a name to look for in the help; clone is named outright
// because it was the suite the old list missed.
type fakeNamed string

func (f fakeNamed) Name() string                                   { return string(f) }
func (f fakeNamed) Synopsis() string                               { return "" }
func (f fakeNamed) Run(ctx context.Context, r *bench.Runner) error { return nil }

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", "/tmp/x"}, "name a suite: api, bigdata, chunks, clone,"},
		{[]string{"nosuch", "--out", "/tmp/x"}, `no suite "nosuch"`},
		{[]string{"sql"}, "--out is required"},
		{[]string{"sql", "--out", "/tmp/x", "--scale", "huge"}, `bad scale "huge"`},
		{[]string{"sql", "--out", "/tmp/x", "--runs", "0"}, "--runs must be at least 1"},
		{[]string{"chunks", "--out", "/tmp/x", "--api", "quic"}, "--api must be"},
		{[]string{"sql", "--out", "/tmp/x", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"sql", "--nosuch"}, "flag provided but not defined: -nosuch"},
		{[]string{"sql", "--clients", "1,x"}, "bad list"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
		if strings.Contains(stderr.String(), "Suites:") {
			t.Errorf("%q printed the whole usage for an error:\n%s", tc.args, stderr.String())
		}
	}
}

// TestOptionsConfig: the flags land in the bench.Config, the suite's name
// first or last.
func TestOptionsConfig(t *testing.T) {
	for _, args := range [][]string{
		{"title5", "--out", "o", "--scale", "large", "--clients", "1,8", "--sizes", "4KiB,16KiB", "--duration", "2s", "--paths", "service,service-same-host", "--bandwidth", "100MB"},
		{"--out", "o", "--scale", "large", "--clients", "1,8", "--sizes", "4KiB,16KiB", "--duration", "2s", "--paths", "service,service-same-host", "--bandwidth", "100MB", "title5"},
	} {
		var o options
		fs := newFlagSet(&o, io.Discard)
		if err := o.parse(fs, args); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		cfg := o.config()
		if o.suite != "title5" || cfg.Out != "o" || cfg.Scale != bench.Large || !slices.Equal(cfg.Clients, []int{1, 8}) ||
			!slices.Equal(cfg.Sizes, []int{4096, 16384}) || cfg.Duration != 2*time.Second || cfg.Runs != 3 ||
			!slices.Equal(cfg.Paths, []string{"service", "service-same-host"}) || cfg.Bandwidth != 100e6 || !cfg.Fsync || cfg.Binary != "" {
			t.Errorf("%q: suite %q, config %+v", args, o.suite, cfg)
		}
	}
}
