package btree

import "fmt"

// ReadFunc returns the bytes of page n. The bytes must not change while
// they are used.
type ReadFunc func(n int64) ([]byte, error)

// Object is a row of the schema table (sqlite_schema, rooted at page 1):
// a table, index, view or trigger, and the root page of its B-tree (0 for
// those that have none).
type Object struct {
	Type  string // "table", "index", "view" or "trigger"
	Name  string
	Table string // the table an index belongs to (tbl_name)
	Root  int64
}

// Schema reads the schema table from page 1 down. Rows whose first four
// columns do not fit their page (a schema of very long names) are passed
// over.
func Schema(read ReadFunc, usable int) ([]Object, error) {
	var out []Object
	err := visit(read, 1, usable, maxDepth, map[int64]bool{}, func(p Page) error {
		if p.Kind() != TableLeaf {
			return fmt.Errorf("%w %d: a page of the schema table of kind 0x%02x", ErrMalformed, p.n, byte(p.Kind()))
		}
		return p.TableRows(func(_ int64, r Record) error {
			if o, ok := object(r); ok {
				out = append(out, o)
			}
			return nil
		})
	})
	return out, err
}

// object reads a schema row's first four columns: type, name, tbl_name
// and rootpage (NULL for views and triggers); false if they are not there
// or not of those types.
func object(r Record) (Object, bool) {
	var v [4]any
	for i := range v {
		var err error
		if v[i], err = r.Column(i); err != nil {
			return Object{}, false // spilled or short
		}
	}
	typ, ok0 := v[0].(string)
	name, ok1 := v[1].(string)
	table, ok2 := v[2].(string)
	root, ok3 := v[3].(int64)
	if !ok0 || !ok1 || !ok2 || !ok3 && v[3] != nil {
		return Object{}, false
	}
	return Object{Type: typ, Name: name, Table: table, Root: root}, true
}

// maxDepth bounds a walk down a B-tree: SQLite's own limit is 20 levels.
const maxDepth = 20

// visit calls fn for each page of the B-tree rooted at page n that is a
// leaf or stop levels below n, in key order, reading the pages above them
// and those. A page met twice (a loop, or cells of a malformed page that
// name one child again and again) is an error: each page is read once.
func visit(read ReadFunc, n int64, usable, stop int, seen map[int64]bool, fn func(Page) error) error {
	if stop < 0 {
		return fmt.Errorf("%w %d: a B-tree deeper than %d levels (a loop?)", ErrMalformed, n, maxDepth)
	}
	if seen[n] {
		return fmt.Errorf("%w %d: the page is in the B-tree twice", ErrMalformed, n)
	}
	seen[n] = true
	b, err := read(n)
	if err != nil {
		return err
	}
	p, err := Parse(b, n, usable)
	if err != nil {
		return err
	}
	if stop == 0 || !p.Kind().Interior() {
		return fn(p)
	}
	children, err := p.Children()
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := visit(read, c, usable, stop-1, seen, fn); err != nil {
			return err
		}
	}
	return nil
}

// Depth returns the levels of interior pages of the B-tree rooted at page
// root and the kind of its leaves, reading down its left edge to the
// first leaf (every leaf of a B-tree is at the same depth).
func Depth(read ReadFunc, root int64, usable int) (int, Kind, error) {
	n := root
	for depth := 0; depth <= maxDepth; depth++ {
		b, err := read(n)
		if err != nil {
			return 0, 0, err
		}
		p, err := Parse(b, n, usable)
		if err != nil {
			return 0, 0, err
		}
		if !p.Kind().Interior() {
			return depth, p.Kind(), nil
		}
		children, err := p.Children()
		if err != nil {
			return 0, 0, err
		}
		n = children[0]
	}
	return 0, 0, fmt.Errorf("%w %d: a B-tree deeper than %d levels (a loop?)", ErrMalformed, root, maxDepth)
}

// Leaves returns the leaf pages of the B-tree rooted at page root, in key
// order. It reads the interior pages, and one leaf (Depth).
func Leaves(read ReadFunc, root int64, usable int) ([]int64, error) {
	depth, _, err := Depth(read, root, usable)
	if err != nil {
		return nil, err
	}
	if depth == 0 {
		return []int64{root}, nil
	}
	var out []int64
	seen := map[int64]bool{}
	err = visit(read, root, usable, depth-1, seen, func(p Page) error {
		children, err := p.Children() // an error for a leaf above the depth
		if err != nil {
			return err
		}
		for _, c := range children {
			if seen[c] {
				return fmt.Errorf("%w %d: page %d is in the B-tree twice", ErrMalformed, p.n, c)
			}
			seen[c] = true
		}
		out = append(out, children...)
		return nil
	})
	return out, err
}
