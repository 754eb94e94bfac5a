package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chunkd/chunkd/gen"
)

// genCommand generates data sets for tests, demos and benchmarks.
type genCommand struct{ cmdBase }

func (c *genCommand) Run(ctx context.Context, args []string) error {
	fs := newFlags("gen", "gen sentences --out FILE.sqlite [--sentences N] [--translations M] [--seed S]", c.stderr)
	out := fs.String("out", "", "output SQLite file (required; must not exist)")
	sentences := fs.Int("sentences", 1_250_000, "rows in sentences")
	translations := fs.Int("translations", 2_500_000, "rows in translations")
	seed := fs.Int64("seed", 1, "random seed: the same seed gives the same file")
	if len(args) > 0 && args[0] == "sentences" {
		args = args[1:]
	} else if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return usagef("want the data set name first: gen sentences [flags]")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if *sentences < 1 || *translations < 0 {
		return usagef("--sentences must be positive and --translations not negative")
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s already exists; remove it or choose another --out", *out)
	}
	start := time.Now()
	p := newProgress(c.stderr, "generate")
	err := gen.Sentences(*out, gen.SentencesOptions{
		Sentences: *sentences, Translations: *translations, Seed: *seed,
		Progress: func(done, total int) { p.update("rows", int64(done), int64(total)) },
	})
	p.done()
	if err != nil {
		os.Remove(*out)
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d sentences, %d translations, %.1f MB in %v\n", *out, *sentences, *translations, float64(st.Size())/1e6, time.Since(start).Round(time.Millisecond))
	return nil
}
