package gen

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
)

// build writes a new SQLite database to path the way Sentences does: with
// PageSize pages, no journal, one transaction, into a temporary file that
// is renamed into place only when complete. It creates the tables of
// schema, calls fill to insert the rows, then runs indexes (the secondary
// indexes, built once over the loaded rows, as sysbench's prepare does:
// they come out compact).
func build(path, schema, indexes string, fill func(ctx context.Context, tx *sql.Tx) error) error {
	tmp := path + ".gen-tmp"
	_ = os.Remove(tmp)
	if err := buildFile(tmp, schema, indexes, fill); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("gen: %w", err)
	}
	return nil
}

func buildFile(path, schema, indexes string, fill func(ctx context.Context, tx *sql.Tx) error) (err error) {
	ctx := context.Background()
	db, err := sql.Open(driverName, "file:"+path)
	if err != nil {
		return fmt.Errorf("gen: open %s: %w", path, err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("gen: close: %w", cerr)
		}
	}()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("gen: open %s: %w", path, err)
	}
	defer conn.Close()
	for _, p := range []string{
		fmt.Sprintf("PRAGMA page_size=%d", PageSize),
		"PRAGMA journal_mode=OFF",
		"PRAGMA synchronous=OFF",
		"PRAGMA locking_mode=EXCLUSIVE",
		"PRAGMA cache_size=-65536", // 64 MiB
	} {
		if _, err := conn.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("gen: %s: %w", p, err)
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("gen: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("gen: create tables: %w", err)
	}
	if err := fill(ctx, tx); err != nil {
		return err
	}
	if strings.TrimSpace(indexes) != "" {
		if _, err := tx.ExecContext(ctx, indexes); err != nil {
			return fmt.Errorf("gen: create indexes: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("gen: commit: %w", err)
	}
	return nil
}

// progress calls fn every progressEvery rows and at the end.
type progress struct {
	fn          func(done, total int)
	done, total int
}

func (p *progress) tick() {
	p.done++
	if p.fn != nil && p.done%progressEvery == 0 && p.done < p.total {
		p.fn(p.done, p.total)
	}
}

func (p *progress) finish() {
	if p.fn != nil {
		p.fn(p.total, p.total)
	}
}
