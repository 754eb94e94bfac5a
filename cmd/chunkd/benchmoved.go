package main

import (
	"fmt"
	"strings"

	"github.com/chunkd/chunkd/internal/shellquote"
)

// benchMoved is what "chunkd bench ARGS" prints (and exits 2): the
// benchmark suites are a command of their own, cmd/chunkd-bench, so that
// chunkd, the binary an operator deploys, links none of the reports'
// plotting code. The name stays as this pointer, unlisted in "chunkd
// help", because the reports kept in docs/bench and older docs and
// scripts say "chunkd bench ...": whoever replays one gets the exact
// command that does it now.
func benchMoved(args []string) string {
	cmd := strings.TrimSpace("go run ./cmd/chunkd-bench " + shellquote.Join(args))
	return fmt.Sprintf("chunkd: the benchmark suites are their own command, chunkd-bench (chunkd links no plotting code); from chunkd's source tree run:\n  %s\n"+
		"('go run ./cmd/chunkd-bench -h' lists the suites and flags.)\n", cmd)
}
