package tablefile

import (
	"github.com/chunkd/chunkd/addr"
)

// Walk reads every record in file order with large sequential reads and
// calls fn with its entry and stored bytes (valid only during the call).
func (t *Table) Walk(fn func(e Entry, stored []byte) error) error {
	const readSize = 4 << 20
	return t.readRanges(MergeRanges(t.Entries(), readSize, readSize), "walk table file", fn)
}

// Problem is one thing Verify found wrong.
type Problem struct {
	Entry Entry
	Err   error
}

func (p Problem) String() string { return p.Err.Error() }

// Verify checks every chunk: its CRC (snappy records), that it decodes,
// and that it hashes to its address. It calls report for each problem and
// returns how many chunks it checked; the error is for IO failures only.
// For classic files it also checks that wantName, if not "", is the name
// the index hashes to.
func (t *Table) Verify(wantName string, report func(Problem)) (int, error) {
	checked, err := t.check(report)
	if err != nil {
		return checked, err
	}
	if wantName != "" && t.format == FormatClassic && t.Name() != wantName {
		report(Problem{Err: corruptf(-1, "", "index hashes to name %s, file is named %s", t.Name(), wantName)})
	}
	return checked, nil
}

func (t *Table) check(report func(Problem)) (int, error) {
	checked := 0
	err := t.Walk(func(e Entry, stored []byte) error {
		checked++
		data, err := t.Decode(e, stored)
		if err != nil {
			report(Problem{e, err})
			return nil
		}
		if got := addr.Of(data); got != e.Addr {
			report(Problem{e, corruptf(int64(e.Offset), e.Addr.String(), "contents hash to %s", got)})
		}
		return nil
	})
	return checked, err
}
