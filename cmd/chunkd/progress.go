package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress reports long work: a bar redrawn in place on a terminal, plain
// lines (at most one every few seconds) otherwise.
type progress struct {
	w     io.Writer
	what  string
	tty   bool
	mu    sync.Mutex
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, what string) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progress{w: w, what: what, tty: tty}
}

func (p *progress) update(phase string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	every := 5 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	if time.Since(p.last) < every && done != total {
		return
	}
	p.last = time.Now()
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	if p.tty {
		const width = 30
		n := int(pct / 100 * width)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < n {
				bar[i] = '='
			}
		}
		fmt.Fprintf(p.w, "\r%s %-9s [%s] %5.1f%% %d/%d", p.what, phase, bar, pct, done, total)
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "%s: %s %d/%d (%.0f%%)\n", p.what, phase, done, total, pct)
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
