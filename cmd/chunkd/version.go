package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/mattn/go-sqlite3"
)

// versionCommand prints what the binary was built from.
type versionCommand struct{ cmdBase }

func (c *versionCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("version", "version", c.stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	b := readBuild()
	fmt.Fprintf(c.stdout, "chunkd %s\n", b.version)
	commit := b.commit
	if commit == "" {
		commit = "unknown (built without version control information)"
	} else {
		if b.time != "" {
			commit += " " + b.time
		}
		if b.modified {
			commit += " (with uncommitted changes)"
		}
	}
	fmt.Fprintf(c.stdout, "commit  %s\n", commit)
	fmt.Fprintf(c.stdout, "go      %s %s/%s\n", b.goVersion, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(c.stdout, "sqlite  %s\n", b.sqlite)
	return nil
}

// build is what the binary knows of how it was built.
type build struct {
	version   string // module version: a tag, a pseudo-version, or "(devel)"
	commit    string // VCS revision, "" if not stamped
	time      string // commit time
	modified  bool   // built from a tree with uncommitted changes
	goVersion string
	sqlite    string // the linked SQLite library
}

func readBuild() build {
	b := build{version: "(devel)", goVersion: runtime.Version()}
	b.sqlite, _, _ = sqlite3.Version()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.commit = s.Value
		case "vcs.time":
			b.time = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}
