package gen

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
)

// build writes a new SQLite database to path, as Sentences, Sysbench and
// IMDb do: with PageSize pages, no journal, one transaction, into a
// temporary file that is renamed into place only when complete. It
// creates the tables of schema, calls fill to insert the rows (ticking p),
// then runs indexes (the secondary indexes, built once over the loaded
// rows, as sysbench's prepare does: they come out compact). Once the file
// is in place it tells p the end.
func build(path, schema, indexes string, p *progress, fill func(ctx context.Context, tx *sql.Tx) error) error {
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
	p.finish()
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

	// No journal and no syncs: the file is built in one go and renamed
	// into place only when complete, so crash safety buys nothing here.
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

// progressEvery is how many rows pass between Progress calls.
const progressEvery = 1 << 14

// batchRows is how many rows one INSERT statement carries.
const batchRows = 128

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

// batcher inserts rows into a table batchRows at a time through one
// prepared multi-row INSERT, to keep per-row overhead low.
type batcher struct {
	ctx   context.Context
	tx    *sql.Tx
	table string
	cols  int
	full  *sql.Stmt
	args  []any
}

func newBatcher(ctx context.Context, tx *sql.Tx, table string, cols int) *batcher {
	return &batcher{ctx: ctx, tx: tx, table: table, cols: cols, args: make([]any, 0, batchRows*cols)}
}

func (b *batcher) insertSQL(rows int) string {
	one := "(" + strings.Repeat("?,", b.cols-1) + "?)"
	return "INSERT INTO " + b.table + " VALUES " + strings.Repeat(one+",", rows-1) + one
}

func (b *batcher) add(vals ...any) error {
	b.args = append(b.args, vals...)
	if len(b.args) < batchRows*b.cols {
		return nil
	}
	if b.full == nil {
		st, err := b.tx.PrepareContext(b.ctx, b.insertSQL(batchRows))
		if err != nil {
			return fmt.Errorf("gen: prepare insert into %s: %w", b.table, err)
		}
		b.full = st
	}
	if _, err := b.full.ExecContext(b.ctx, b.args...); err != nil {
		return fmt.Errorf("gen: insert into %s: %w", b.table, err)
	}
	b.args = b.args[:0]
	return nil
}

// flush writes any rows still buffered and releases the statement.
func (b *batcher) flush() error {
	if b.full != nil {
		defer b.full.Close()
	}
	if len(b.args) == 0 {
		return nil
	}
	if _, err := b.tx.ExecContext(b.ctx, b.insertSQL(len(b.args)/b.cols), b.args...); err != nil {
		return fmt.Errorf("gen: insert into %s: %w", b.table, err)
	}
	b.args = b.args[:0]
	return nil
}
