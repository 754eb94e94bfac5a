package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// sizeFlag is a byte size given as 256MiB, 10GiB, 1.5GB or plain bytes.
type sizeFlag int64

func (s *sizeFlag) String() string { return humanize.IBytes(uint64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return fmt.Errorf("bad size %q: want a size such as 256MiB", v)
	}
	*s = sizeFlag(n)
	return nil
}

// intsFlag is a comma-separated list of positive integers.
type intsFlag []int

func (f *intsFlag) String() string {
	parts := make([]string, len(*f))
	for i, v := range *f {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (f *intsFlag) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return fmt.Errorf("bad list %q: want positive integers separated by commas", v)
		}
		out = append(out, n)
	}
	*f = out
	return nil
}

// sizesFlag is a comma-separated list of byte sizes (4KiB,16KiB).
type sizesFlag []int

func (f *sizesFlag) String() string {
	parts := make([]string, len(*f))
	for i, v := range *f {
		parts[i] = humanize.IBytes(uint64(v))
	}
	return strings.Join(parts, ",")
}

func (f *sizesFlag) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := humanize.ParseBytes(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 1<<30 {
			return fmt.Errorf("bad size list %q: want sizes such as 4KiB,16KiB", v)
		}
		out = append(out, int(n))
	}
	*f = out
	return nil
}
