package tablefile

// STUB: replaced by the archive reader.

type archive struct{}

func (a *archive) decode(t *Table, e Entry, stored []byte) ([]byte, error) {
	return nil, notTablef("archives not supported yet")
}

func (t *Table) openArchive(tail []byte) error {
	return notTablef("archives not supported yet")
}
