// Package manifest reads and writes Dolt's table-file manifest, and finds
// the databases (manifest plus table files) that live in an object store.
//
// # The manifest
//
// A Dolt database, or a Dolt file:// remote, is a set of immutable table
// files and one small mutable object, "manifest", that names them. The
// manifest is one line of colon-separated fields with no trailing newline:
//
//	4:<nbf>:<lock>:<root>:<name>:<count>:<name>:<count>...
//	5:<nbf>:<lock>:<root>:<gcgen>:<name>:<count>:<name>:<count>...
//
// The first field is the manifest version (Dolt writes 5; 4, which has no
// garbage-collection generation, is still read). nbf is the storage format,
// "__DOLT__" for every current Dolt database (see FormatDolt). lock, root
// and gcgen are 32-character base32 addresses. Then come the table files,
// each as its name (an address, without any ".darc" suffix) and its chunk
// count in decimal. The chunk journal of a local database appears as the
// ordinary-looking spec "vvvv…vvvv" (see IsJournal), although it is not a
// table file.
//
// Parse and Marshal are exact inverses: Parse accepts only the canonical
// text Dolt writes (no leading zeros in counts, no trailing newline), so
// Marshal reproduces the parsed bytes exactly.
//
// # The lock hash
//
// Dolt uses the lock field for optimistic concurrency only: a writer
// replaces the manifest only if its lock is still the one it read. Dolt
// never recomputes a lock from the contents to check it, so any value that
// changes with the contents works; ComputeLock computes it the way Dolt
// does (see its doc comment) so that manifests chunkd writes look like
// Dolt's. chunkd itself guards updates with the store's object versions
// (store.Store.PutIf), not with the lock.
//
// # Appendix files
//
// An appendix table file holds an ordered copy of all of a database's data;
// caches prefer to download it whole. Dolt has an appendix notion in its
// NBS layer: the AWS manifest (a DynamoDB item) has an "appendix" attribute
// beside "specs", and whenever Dolt records appendix files it also prepends
// them to the ordinary spec list, so readers that ignore the appendix still
// see every file. The lock hash covers the appendix names too. Dolt's file
// manifest, though, has no appendix field: a file manifest written by Dolt
// loses the distinction and keeps only the (prepended) specs.
//
// chunkd follows the same idea without changing the file format, which
// Dolt's readers must keep understanding:
//
//   - every appendix file is also listed as an ordinary spec in the
//     manifest, first, in appendix order, as Dolt does (Manifest.SetAppendix
//     arranges this), so Dolt sees and keeps every file;
//   - a small sidecar object, "manifest.chunkd" beside the manifest, names
//     which specs are appendix files. It is JSON:
//     {"format":"chunkd.appendix.v1","manifest":"<hash>","appendix":["<name>",...]}
//     where <hash> is the SHA-512 of the exact manifest bytes it describes,
//     truncated to 20 bytes and written like an address (addr.Of).
//
// The sidecar is bound to one manifest by that hash. A reader (DB.Load)
// uses the sidecar only if it names the manifest just read, and even then
// keeps only names that are specs of that manifest. Anything else - a
// crash between the two writes, a writer that lost a race, Dolt itself
// rewriting the manifest after a push - leaves a sidecar that names some
// other manifest, and the reader then sees no appendix at all. Since the
// appendix is only a download preference, losing it costs speed, never
// correctness, and a reader never sees an appendix name that is not in the
// manifest it was given. See DB.Update for the write order.
//
// The format string is the sidecar's version. A later chunkd may add JSON
// fields under the same format (readers ignore unknown fields); a change
// that older readers would misread needs a new format string, which they
// refuse with an error rather than guess.
package manifest

import (
	"crypto/sha512"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/chunkd/chunkd/addr"
)

// Manifest versions (the first field).
const (
	// Version4 is the older manifest layout, without a GC generation.
	Version4 = "4"
	// Version5 is the layout Dolt writes today, with a GC generation.
	Version5 = "5"
)

// Storage formats (the nbf field). A tool that does not know a format
// leaves the database alone: current Dolt accepts only "__DOLT__" and
// refuses any other nbf with "unsupported ChunkStore version".
const (
	// FormatDolt marks a Dolt database.
	FormatDolt = "__DOLT__"
	// FormatChunkdSQLite marks a chunkd SQLite database, stored in Dolt's
	// table files but not readable by Dolt.
	FormatChunkdSQLite = "__CHUNKD_SQLITE_1__"
)

// JournalName is the spec name of a local Dolt database's chunk journal. It
// is listed in the manifest like a table file but is not one.
const JournalName = "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"

// IsJournal reports whether a spec name is the chunk journal rather than a
// table file.
func IsJournal(name string) bool { return name == JournalName }

// ErrCorrupt is wrapped by every error Parse returns.
var ErrCorrupt = errors.New("corrupt manifest")

// Spec is one table file listed in a manifest.
type Spec struct {
	// Name is the file's 32-character base32 name, without ".darc".
	Name string
	// Chunks is the number of chunks in the file.
	Chunks uint32
}

// Manifest is the parsed content of a manifest, plus the appendix names
// from its sidecar.
type Manifest struct {
	// Version is the manifest version, Version4 or Version5.
	Version string
	// NBF is the storage format, such as FormatDolt.
	NBF string
	// Lock is the optimistic-concurrency token (see ComputeLock).
	Lock addr.Addr
	// Root is the address of the database's root chunk.
	Root addr.Addr
	// GCGen is the garbage-collection generation; always empty in version 4.
	GCGen addr.Addr
	// Specs lists the table files, in manifest order.
	Specs []Spec
	// Appendix names the specs that are appendix files. It is not part of
	// the manifest text: Parse leaves it nil and Marshal ignores it; DB.Load
	// fills it from the sidecar and DB.Update writes it there.
	Appendix []string
}

// ParseError describes what was wrong with a manifest and where.
type ParseError struct {
	// Field is the 1-based number of the colon-separated field at fault,
	// or 0 if the fault is not in one field.
	Field int
	// What names the field ("lock hash", "chunk count of table 2", ...).
	What string
	// Text is the offending text, clipped to 64 bytes.
	Text string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Field == 0 {
		return fmt.Sprintf("%v: %s", ErrCorrupt, e.Reason)
	}
	return fmt.Sprintf("%v: field %d (%s) %q: %s", ErrCorrupt, e.Field, e.What, e.Text, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *ParseError) Unwrap() error { return ErrCorrupt }

func fieldErr(field int, what, text, reason string) error {
	return &ParseError{Field: field, What: what, Text: clip(text), Reason: reason}
}

func wholeErr(format string, args ...any) error {
	return &ParseError{Reason: fmt.Sprintf(format, args...)}
}

// Parse reads a version 4 or 5 manifest. Errors wrap ErrCorrupt and are
// *ParseError values naming the field and the bad text.
func Parse(b []byte) (*Manifest, error) {
	if len(b) == 0 {
		return nil, wholeErr("empty input (a manifest starts with its version, 4 or 5)")
	}
	if b[len(b)-1] == '\n' || b[len(b)-1] == '\r' {
		return nil, wholeErr("ends with a line break at byte %d; a manifest is one line with none", len(b)-1)
	}
	fields := strings.Split(string(b), ":")
	m := &Manifest{Version: fields[0]}
	var header int
	var layout string
	switch m.Version {
	case Version4:
		header, layout = 4, "4:nbf:lock:root"
	case Version5:
		header, layout = 5, "5:nbf:lock:root:gcgen"
	default:
		return nil, fieldErr(1, "manifest version", fields[0], "unknown version; chunkd reads versions 4 and 5")
	}
	if len(fields) < header {
		return nil, wholeErr("version %s manifest has %d fields, want at least %d (%s)", m.Version, len(fields), header, layout)
	}
	if rest := len(fields) - header; rest%2 != 0 {
		return nil, wholeErr("version %s manifest has %d fields: after the %d header fields the tables must come as name:count pairs, but %d fields remain (odd); the last, field %d, is %q",
			m.Version, len(fields), header, rest, len(fields), clip(fields[len(fields)-1]))
	}
	if reason := checkNBF(fields[1]); reason != "" {
		return nil, fieldErr(2, "storage format (nbf)", fields[1], reason)
	}
	m.NBF = fields[1]
	var err error
	if m.Lock, err = parseAddrField(fields, 3, "lock hash"); err != nil {
		return nil, err
	}
	if m.Root, err = parseAddrField(fields, 4, "root hash"); err != nil {
		return nil, err
	}
	if m.Version == Version5 {
		if m.GCGen, err = parseAddrField(fields, 5, "GC generation"); err != nil {
			return nil, err
		}
	}
	if n := (len(fields) - header) / 2; n > 0 {
		m.Specs = make([]Spec, n)
	}
	for i := range m.Specs {
		nameField := header + 2*i // 0-based index of the name
		name := fields[nameField]
		if reason := checkAddrText(name); reason != "" {
			return nil, fieldErr(nameField+1, fmt.Sprintf("name of table %d", i+1), name, reason)
		}
		count := fields[nameField+1]
		c, reason := parseCount(count)
		if reason != "" {
			return nil, fieldErr(nameField+2, fmt.Sprintf("chunk count of table %d", i+1), count, reason)
		}
		m.Specs[i] = Spec{Name: name, Chunks: c}
	}
	return m, nil
}

func parseAddrField(fields []string, field int, what string) (addr.Addr, error) {
	text := fields[field-1]
	if reason := checkAddrText(text); reason != "" {
		return addr.Addr{}, fieldErr(field, what, text, reason)
	}
	a, err := addr.Parse(text)
	if err != nil { // cannot happen after checkAddrText, but keep the error
		return addr.Addr{}, fieldErr(field, what, text, err.Error())
	}
	return a, nil
}

// checkAddrText returns why s is not an address's text form, or "".
func checkAddrText(s string) string {
	if len(s) != addr.TextSize {
		return fmt.Sprintf("want %d characters of 0-9a-v, got %d", addr.TextSize, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return fmt.Sprintf("character %q at position %d is not in 0-9a-v", c, i)
		}
	}
	return ""
}

// parseCount reads a canonical decimal uint32, or returns why it is not one.
func parseCount(s string) (uint32, string) {
	if s == "" {
		return 0, "empty; want a decimal chunk count"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Sprintf("character %q at position %d is not a decimal digit", s[i], i)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, "leading zero; Dolt writes counts without one"
	}
	c, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, "out of range; a chunk count must fit in 32 bits"
	}
	return uint32(c), ""
}

// checkNBF returns why s cannot be a storage format, or "".
func checkNBF(s string) string {
	if s == "" {
		return "empty; want a storage format such as " + FormatDolt
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == ':' {
			return fmt.Sprintf("character %q at position %d is not printable ASCII", c, i)
		}
	}
	return ""
}

// Marshal writes the manifest in Dolt's format: version 4 without the GC
// generation, any other version with it. The appendix is not written (it
// belongs in the sidecar). Marshal does not check the manifest; call
// Validate first when it did not come from Parse.
func (m *Manifest) Marshal() []byte {
	n := 5*(addr.TextSize+1) + len(m.NBF) + len(m.Version) + len(m.Specs)*(addr.TextSize+12)
	b := make([]byte, 0, n)
	b = append(b, m.Version...)
	b = append(b, ':')
	b = append(b, m.NBF...)
	b = append(b, ':')
	b = append(b, m.Lock.String()...)
	b = append(b, ':')
	b = append(b, m.Root.String()...)
	if m.Version != Version4 {
		b = append(b, ':')
		b = append(b, m.GCGen.String()...)
	}
	for _, s := range m.Specs {
		b = append(b, ':')
		b = append(b, s.Name...)
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(s.Chunks), 10)
	}
	return b
}

// Validate checks that the manifest can be written and read back: a known
// version, a printable nbf, a non-empty lock, no GC generation in version
// 4, spec names that are addresses and listed once, and appendix names
// that are specs and listed once.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invalid manifest: "+format, args...)
	}
	if m.Version != Version4 && m.Version != Version5 {
		return bad("version %q; want %q or %q", clip(m.Version), Version4, Version5)
	}
	if reason := checkNBF(m.NBF); reason != "" {
		return bad("storage format (nbf) %q: %s", clip(m.NBF), reason)
	}
	if m.Lock.IsEmpty() {
		return bad("lock hash is empty; set it with Relock")
	}
	if m.Version == Version4 && !m.GCGen.IsEmpty() {
		return bad("version 4 has no GC generation, but GCGen is %s", m.GCGen)
	}
	specs := make(map[string]int, len(m.Specs))
	for i, s := range m.Specs {
		if reason := checkAddrText(s.Name); reason != "" {
			return bad("name of table %d %q: %s", i+1, clip(s.Name), reason)
		}
		if j, dup := specs[s.Name]; dup {
			return bad("table %s listed twice (tables %d and %d)", s.Name, j+1, i+1)
		}
		specs[s.Name] = i
	}
	seen := make(map[string]bool, len(m.Appendix))
	for _, name := range m.Appendix {
		if _, ok := specs[name]; !ok {
			return bad("appendix file %q is not among the tables; every appendix file must also be a spec", clip(name))
		}
		if seen[name] {
			return bad("appendix file %s listed twice", name)
		}
		seen[name] = true
	}
	return nil
}

// ComputeLock returns the lock hash Dolt would give a manifest with this
// root, appendix and specs: the first 20 bytes of the SHA-512 of the root's
// 20 bytes, each appendix name's 20 bytes, a zero byte, each spec name's 20
// bytes, and a zero byte (Dolt's generateLockHash in store/nbs/manifest.go,
// with no "extra" bytes; Dolt passes extra only when computing a GC
// generation). Pass the full spec list, appendix files included, as Dolt
// does; pass a nil appendix for a manifest with none. Names must be
// addresses.
func ComputeLock(root addr.Addr, appendix []string, specs []Spec) (addr.Addr, error) {
	h := sha512.New()
	h.Write(root[:])
	for _, name := range appendix {
		a, err := addr.Parse(name)
		if err != nil {
			return addr.Addr{}, fmt.Errorf("compute lock: appendix name: %w", err)
		}
		h.Write(a[:])
	}
	h.Write([]byte{0})
	for _, s := range specs {
		a, err := addr.Parse(s.Name)
		if err != nil {
			return addr.Addr{}, fmt.Errorf("compute lock: table name: %w", err)
		}
		h.Write(a[:])
	}
	h.Write([]byte{0})
	var lock addr.Addr
	copy(lock[:], h.Sum(nil))
	return lock, nil
}

// Relock sets m.Lock to ComputeLock(m.Root, m.Appendix, m.Specs). Call it
// after changing the root, the specs or the appendix.
func (m *Manifest) Relock() error {
	lock, err := ComputeLock(m.Root, m.Appendix, m.Specs)
	if err != nil {
		return err
	}
	m.Lock = lock
	return nil
}

// SetAppendix makes the given table files the manifest's appendix, the way
// Dolt records an appendix: each is added to Specs if missing (or its chunk
// count updated), all of them are moved to the front of Specs in the given
// order, and Appendix is set to their names. Files that were appendix files
// before and are not in the new set stay as ordinary specs. SetAppendix
// does not change the lock; call Relock afterwards.
func (m *Manifest) SetAppendix(files []Spec) {
	in := make(map[string]bool, len(files))
	specs := make([]Spec, 0, len(files)+len(m.Specs))
	names := make([]string, 0, len(files))
	for _, f := range files {
		if in[f.Name] {
			continue
		}
		in[f.Name] = true
		specs = append(specs, f)
		names = append(names, f.Name)
	}
	for _, s := range m.Specs {
		if !in[s.Name] {
			specs = append(specs, s)
		}
	}
	m.Specs = specs
	m.Appendix = names
}

// HasSpec reports whether the manifest lists a table file by this name.
func (m *Manifest) HasSpec(name string) bool {
	for _, s := range m.Specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
