// Package bank is a bank-transfer workload on a SQLite database, for tests
// and benchmarks of chunkd publish: a writer process moves money between
// accounts (the sum of balances never changes) and logs each transfer with
// its commit time; reader processes check that every published version
// keeps the sum, and say which transfers it holds and when they saw it.
//
// The writer and the readers are real processes: the running binary,
// started again with CHUNKD_BANK set (Writer, Reader). A binary that
// starts them calls Main first thing (package bench does, from init, so
// every binary that links it can).
package bank

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3" // the writer's SQLite

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/manifest"
	"github.com/chunkd/chunkd/sqlchunks"
	"github.com/chunkd/chunkd/store"
)

// env carries a child's role and job: "writer:PATH:RATE" or
// "reader:STORE-URL:DB".
const env = "CHUNKD_BANK"

// Balance is every account's balance at the start.
const Balance = 1000

// Create makes a bank database at path: accounts accounts of Balance each
// and an empty transfer log, in WAL mode or (wal false) with a rollback
// journal.
func Create(path string, accounts int, wal bool) error {
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	mode := "DELETE"
	if wal {
		mode = "WAL"
	}
	for _, s := range []string{
		"PRAGMA journal_mode = " + mode,
		`CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT NOT NULL, balance INTEGER NOT NULL)`,
		`CREATE TABLE transfers(seq INTEGER PRIMARY KEY, src INTEGER, dst INTEGER, amount INTEGER, at_ns INTEGER NOT NULL)`,
		fmt.Sprintf(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < %d)
			INSERT INTO accounts SELECT x, printf('owner %%06d of a bank account', x), %d FROM c`, accounts, Balance),
	} {
		if _, err := db.Exec(s); err != nil {
			return fmt.Errorf("bank: %s: %w", strings.Fields(s)[0], err)
		}
	}
	return nil
}

// State is what a version of the bank holds.
type State struct {
	Accounts int64 // the number of accounts
	Sum      int64 // the sum of balances: Accounts × Balance in every consistent state
	MaxSeq   int64 // the last transfer it holds (0: none)
}

// Check reads the state of a bank database.
func Check(ctx context.Context, db *sql.DB) (State, error) {
	var st State
	if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(balance), 0) FROM accounts`).Scan(&st.Accounts, &st.Sum); err != nil {
		return st, err
	}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM transfers`).Scan(&st.MaxSeq); err != nil {
		return st, err
	}
	return st, nil
}

// Consistent reports whether the state keeps the invariant.
func (s State) Consistent() bool { return s.Accounts > 0 && s.Sum == s.Accounts*Balance }

// Main runs this process as a writer or reader if CHUNKD_BANK says so,
// and exits then; else it returns at once.
func Main() {
	job := os.Getenv(env)
	if job == "" {
		return
	}
	role, rest, _ := strings.Cut(job, ":")
	var err error
	switch role {
	case "writer":
		err = writerMain(rest)
	case "reader":
		err = readerMain(rest)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bank:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Commit is one transfer the writer committed: its sequence number, when
// it began committing (the time it logged) and how long the commit took.
type Commit struct {
	Seq     int64
	At      time.Time
	Latency time.Duration
}

// Writer is a writer process.
type Writer struct {
	cmd     *exec.Cmd
	commits chan Commit
	done    chan error
}

// StartWriter starts a writer process on the bank database at path, which
// makes about rate transfers a second (synchronous=FULL: each commit is
// durable) until Stop. Its commits arrive on Commits.
func StartWriter(path string, rate int) (*Writer, error) {
	cmd, out, err := start(fmt.Sprintf("writer:%d:%s", rate, path))
	if err != nil {
		return nil, err
	}
	w := &Writer{cmd: cmd, commits: make(chan Commit, 1<<16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var seq, at, lat int64
			if _, err := fmt.Sscan(sc.Text(), &seq, &at, &lat); err == nil {
				w.commits <- Commit{seq, time.Unix(0, at), time.Duration(lat)}
			}
		}
		close(w.commits)
		w.done <- cmd.Wait()
	}()
	return w, nil
}

// Commits gives the writer's commits as it makes them; closed when it
// has stopped. The caller reads it to the end: it holds up to 65536
// commits unread, and then the writer waits.
func (w *Writer) Commits() <-chan Commit { return w.commits }

// Stop stops the writer (SIGTERM: it finishes its transaction) and
// waits for it. It leaves Commits to its reader: reading it here too
// would take commits the reader never sees.
func (w *Writer) Stop() error {
	w.cmd.Process.Signal(syscall.SIGTERM)
	return <-w.done
}

func start(job string) (*exec.Cmd, io.Reader, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"="+job)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, out, nil
}

// writerMain makes transfers and prints "seq at_ns latency_ns" for each
// commit, until SIGTERM.
func writerMain(job string) error {
	rateText, path, _ := strings.Cut(job, ":")
	rate, err := strconv.Atoi(rateText)
	if err != nil || rate <= 0 {
		return fmt.Errorf("writer: rate %q", rateText)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000&_sync=FULL")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var accounts, seq int64
	if err := db.QueryRow(`SELECT count(*) FROM accounts`).Scan(&accounts); err != nil {
		return err
	}
	if err := db.QueryRow(`SELECT coalesce(max(seq), 0) FROM transfers`).Scan(&seq); err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	every := time.Second / time.Duration(rate)
	next := time.Now()
	for ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		next = next.Add(every)
		src, dst := 1+r.Int64N(accounts), 1+r.Int64N(accounts)
		amount := 1 + r.Int64N(50)
		seq++
		at := time.Now()
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for _, st := range []struct {
			q    string
			args []any
		}{
			{`UPDATE accounts SET balance = balance - ? WHERE id = ?`, []any{amount, src}},
			{`UPDATE accounts SET balance = balance + ? WHERE id = ?`, []any{amount, dst}},
			{`INSERT INTO transfers VALUES (?, ?, ?, ?, ?)`, []any{seq, src, dst, amount, at.UnixNano()}},
		} {
			if _, err := tx.Exec(st.q, st.args...); err != nil {
				tx.Rollback()
				return err
			}
		}
		c0 := time.Now()
		if err := tx.Commit(); err != nil {
			return err
		}
		fmt.Fprintf(out, "%d %d %d\n", seq, at.UnixNano(), time.Since(c0).Nanoseconds())
		out.Flush()
	}
	return nil
}

// Seen is a version a reader checked.
type Seen struct {
	Root  addr.Addr
	State State
	// At is when the reader first found it the head (zero for a version
	// it found only in the history of a later head).
	At  time.Time
	Err string // why it did not read, if it did not
}

// Reader is a reader process.
type Reader struct {
	cmd  *exec.Cmd
	seen chan Seen
	done chan error
}

// StartReader starts a reader process: it polls database db of the store
// at storeURL for a new head every 10 ms and checks every version since
// the first head it saw, until Stop. With a service (its URL), it reads
// each version through that cache service alone, by its root, the moment
// it sees it: what an application reading a version just published does.
// With service "" it reads the store.
func StartReader(storeURL, db, service string) (*Reader, error) {
	cmd, out, err := start("reader:" + db + "\t" + service + "\t" + storeURL)
	if err != nil {
		return nil, err
	}
	r := &Reader{cmd: cmd, seen: make(chan Seen, 1<<16), done: make(chan error, 1)}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var s Seen
			if err := dec.Decode(&s); err != nil {
				break
			}
			r.seen <- s
		}
		close(r.seen)
		r.done <- cmd.Wait()
	}()
	return r, nil
}

// Seen gives the versions the reader checked; closed when it has stopped.
func (r *Reader) Seen() <-chan Seen { return r.seen }

// Stop stops the reader and waits for it; the versions it checked stay
// to be read from Seen.
func (r *Reader) Stop() error {
	r.cmd.Process.Signal(syscall.SIGTERM)
	return <-r.done
}

// readerMain checks every new version as the head moves, printing a Seen
// as JSON for each.
func readerMain(job string) error {
	db, rest, _ := strings.Cut(job, "\t")
	service, storeURL, _ := strings.Cut(rest, "\t")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s, err := store.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer s.Close()
	mdb, err := manifest.Open(ctx, s, db)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	checked := map[addr.Addr]bool{}
	var last addr.Addr
	for ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		m, _, err := mdb.Load(ctx)
		if err != nil || m.Root == last {
			continue
		}
		at := time.Now()
		first := last.IsEmpty()
		last = m.Root
		for _, s := range checkSince(ctx, s, service, db, m.Root, at, checked, first) {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSince checks head and every version before it not checked yet,
// through the service if there is one, else from the store
// (only the head, on the reader's first look: the versions made before
// it started are not its to check).
func checkSince(ctx context.Context, s store.Store, service, db string, head addr.Addr, at time.Time, checked map[addr.Addr]bool, first bool) []Seen {
	opts := client.Options{Store: s, DB: db, MemBytes: -1}
	if service != "" {
		opts = client.Options{Service: service, DB: db, MemBytes: -1}
	}
	c, err := client.Open(ctx, opts)
	if err != nil {
		return []Seen{{Root: head, At: at, Err: err.Error()}}
	}
	defer c.Close()
	var out []Seen
	for a := head; !a.IsEmpty() && !checked[a]; {
		checked[a] = true
		seen := Seen{Root: a}
		if a == head {
			seen.At = at
		}
		v, err := sqlchunks.ReadVersion(ctx, c, a)
		if err == nil {
			var d *sql.DB
			if d, err = openVersion(ctx, c, a); err == nil {
				seen.State, err = Check(ctx, d)
				d.Close()
			}
		}
		if err != nil {
			seen.Err = err.Error()
			out = append(out, seen)
			break
		}
		out = append(out, seen)
		if first {
			break
		}
		a = v.Parent
	}
	return out
}

func openVersion(ctx context.Context, c *client.Client, root addr.Addr) (*sql.DB, error) {
	d, err := sqlchunks.OpenVersion(ctx, c, root, nil)
	if err != nil {
		return nil, err
	}
	return d.DB, nil
}

// Percentile returns the p-th percentile (0-100) of ds, by the nearest
// rank; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// FirstSeen returns, for each commit, when a reader first saw a head that
// holds it (zero if none did): versions are what the readers checked, the
// heads among them at their At.
func FirstSeen(commits []Commit, versions []Seen) []time.Time {
	var vs []Seen
	for _, v := range versions {
		if !v.At.IsZero() && v.Err == "" {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	out := make([]time.Time, len(commits))
	for i, c := range commits {
		for _, v := range vs {
			if v.State.MaxSeq >= c.Seq {
				out[i] = v.At
				break
			}
		}
	}
	return out
}
