package gen

import (
	"context"
	"database/sql"
	"fmt"
	"math"
)

// Sysbench's tables, in SQLite.
//
// sbtest1 and sbtest2 have the shape of sysbench's OLTP tables: an integer
// primary key, a secondary key k (uniform over 1..rows, so about one row
// per value) with an index, a 119-character c and a 59-character pad made
// of groups of eleven digits joined by dashes. sbtypes is a table of many
// column types (integers of every width, reals, a decimal, short and
// longer text, a blob, JSON, dates and times) with an index on
// big_int_col, for the type-heavy scans of Dolt's read tests
// (types_table_scan, groupby_scan). Declared types are what SQLite's type
// affinity makes of them; CHAR(120) is TEXT, not padded.
const SysbenchSchema = `CREATE TABLE sbtest1(id INTEGER PRIMARY KEY, k INTEGER NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '');
CREATE TABLE sbtest2(id INTEGER PRIMARY KEY, k INTEGER NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '');
CREATE TABLE sbtypes(
  id INTEGER PRIMARY KEY,
  tiny_int_col TINYINT NOT NULL,
  small_int_col SMALLINT NOT NULL,
  medium_int_col MEDIUMINT NOT NULL,
  int_col INT NOT NULL,
  big_int_col BIGINT NOT NULL,
  decimal_col DECIMAL(10,2) NOT NULL,
  float_col FLOAT NOT NULL,
  double_col DOUBLE NOT NULL,
  bit_col BOOLEAN NOT NULL,
  char_col CHAR(1) NOT NULL,
  var_char_col VARCHAR(64) NOT NULL,
  text_col TEXT NOT NULL,
  blob_col BLOB NOT NULL,
  json_col JSON NOT NULL,
  enum_col TEXT NOT NULL,
  set_col TEXT NOT NULL,
  date_col DATE NOT NULL,
  time_col TIME NOT NULL,
  datetime_col DATETIME NOT NULL,
  timestamp_col TIMESTAMP NOT NULL,
  year_col YEAR NOT NULL);`

// SysbenchIndexes are the secondary indexes, built after the rows.
const SysbenchIndexes = `CREATE INDEX k_1 ON sbtest1(k);
CREATE INDEX k_2 ON sbtest2(k);
CREATE INDEX sbtypes_big_int ON sbtypes(big_int_col);`

// SysbenchOptions sizes and seeds a sysbench data set.
type SysbenchOptions struct {
	// Rows is the number of rows of sbtest1 and of sbtest2, with ids
	// 1..Rows. It must be at least 1.
	Rows int
	// TypesRows is the number of rows of sbtypes (ids 1..TypesRows); 0
	// means Rows.
	TypesRows int
	// Seed selects the data; the same seed gives the same file.
	Seed int64
	// Progress, if not nil, is called now and then with the rows written
	// so far and the total, and once at the end with done == total.
	Progress func(done, total int)
}

// Sysbench writes a new SQLite database to path (replacing any file
// there) holding sbtest1, sbtest2 and sbtypes (see SysbenchSchema), with
// 4096-byte pages. The same options give a byte-identical file with the
// same SQLite library.
func Sysbench(path string, o SysbenchOptions) error {
	if o.Rows < 1 {
		return fmt.Errorf("gen: Rows must be at least 1, got %d", o.Rows)
	}
	if o.TypesRows < 0 {
		return fmt.Errorf("gen: TypesRows must not be negative, got %d", o.TypesRows)
	}
	if o.TypesRows == 0 {
		o.TypesRows = o.Rows
	}
	p := &progress{fn: o.Progress, total: 2*o.Rows + o.TypesRows}
	return build(path, SysbenchSchema, SysbenchIndexes, p, func(ctx context.Context, tx *sql.Tx) error {
		for t := 1; t <= 2; t++ {
			if err := fillSbtest(ctx, tx, fmt.Sprintf("sbtest%d", t), o.Rows, newRNG(o.Seed, uint64(10+t)), p); err != nil {
				return err
			}
		}
		return fillTypes(ctx, tx, o.TypesRows, newRNG(o.Seed, 20), p)
	})
}

// digitGroups appends n groups of eleven random digits joined by dashes
// (11n + n - 1 bytes): sysbench's filler for c and pad.
func digitGroups(b []byte, r *rng, n int) []byte {
	for g := 0; g < n; g++ {
		if g > 0 {
			b = append(b, '-')
		}
		for i := 0; i < 11; i++ {
			b = append(b, byte('0'+r.intn(10)))
		}
	}
	return b
}

func fillSbtest(ctx context.Context, tx *sql.Tx, table string, rows int, r *rng, p *progress) error {
	ins := newBatcher(ctx, tx, table, 4)
	var c, pad []byte
	for id := 1; id <= rows; id++ {
		k := r.intn(rows) + 1
		c = digitGroups(c[:0], r, 10)
		pad = digitGroups(pad[:0], r, 5)
		if err := ins.add(int64(id), int64(k), string(c), string(pad)); err != nil {
			return err
		}
		p.tick()
	}
	return ins.flush()
}

// between64 returns a value in [lo, hi] for ranges wider than int.
func (r *rng) between64(lo, hi int64) int64 {
	span := uint64(hi - lo)
	if span == math.MaxUint64 {
		return int64(r.next())
	}
	x := r.next() % (span + 1) // the bias is far below what matters here
	return lo + int64(x)
}

// sbtypesCols is the number of columns of sbtypes.
const sbtypesCols = 22

func fillTypes(ctx context.Context, tx *sql.Tx, rows int, r *rng, p *progress) error {
	ins := newBatcher(ctx, tx, "sbtypes", sbtypesCols)
	const nvals = 14 // enum-like values val0..val13
	words := languages[0].vocab
	blob := make([]byte, 16)
	for id := 1; id <= rows; id++ {
		month, day := r.between(1, 12), r.between(1, 28)
		hour, minute, sec := r.between(0, 23), r.between(0, 59), r.between(0, 59)
		for i := range blob {
			blob[i] = byte(r.intn(256))
		}
		text := string(words[r.intn(len(words))]) + " " + string(words[r.intn(len(words))]) + " " + string(words[r.intn(len(words))])
		err := ins.add(
			int64(id),
			r.between64(-128, 127),
			r.between64(-32768, 32767),
			r.between64(-8388608, 8388607),
			r.between64(math.MinInt32, math.MaxInt32),
			r.between64(-1<<62, 1<<62-1),
			float64(r.between(0, 9999999))/100,
			float64(r.next()>>40)/(1<<24),
			float64(r.next()>>11)/(1<<53),
			r.intn(2),
			string(rune('0'+r.intn('Z'-'0'+1))),
			fmt.Sprintf("val%d", r.intn(nvals)),
			text,
			append([]byte(nil), blob...),
			fmt.Sprintf(`{"val%d":%d}`, r.intn(nvals), r.intn(1000)),
			fmt.Sprintf("val%d", r.intn(nvals)),
			fmt.Sprintf("val%d", r.intn(nvals)),
			fmt.Sprintf("2020-%02d-%02d", month, day),
			fmt.Sprintf("%02d:%02d:%02d", hour, minute, sec),
			fmt.Sprintf("2020-%02d-%02d %02d:%02d:%02d", month, day, hour, minute, sec),
			r.between64(1577836800, 1609459199), // a Unix time in 2020
			r.between64(1901, 2155),
		)
		if err != nil {
			return err
		}
		p.tick()
	}
	return ins.flush()
}
