package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/chunkd/chunkd/gen"
	"github.com/chunkd/chunkd/sqlitevfs"
)

const title5DBName = "imdb"

// title5CacheKiB is each SQLite connection's page cache in the suite.
const title5CacheKiB = 1024

// title5Queries are the transaction's statements: a movie's row, its
// genres, its rating, its characters with the people who play them, and
// its principal people with their category. Each looks the movie up by
// its (non-unique) title again, as the benchmark's application does.
var title5Queries = []struct{ name, sql string }{
	{"movie", "SELECT t.* FROM title AS t WHERE t.title = ? AND t.type = 'movie'"},
	{"genres", "SELECT g.genre FROM title AS t JOIN title_genre AS g ON g.title_id = t.title_id WHERE t.title = ? AND t.type = 'movie'"},
	{"rating", "SELECT t.title, r.average_rating, r.num_votes FROM title AS t JOIN title_rating AS r ON r.title_id = t.title_id WHERE t.title = ? AND t.type = 'movie'"},
	{"characters", "SELECT n.name, c.character_name FROM title AS t JOIN title_name_character AS c ON c.title_id = t.title_id JOIN name AS n ON n.name_id = c.name_id WHERE t.title = ? AND t.type = 'movie'"},
	{"principals", "SELECT n.name, p.category FROM title AS t JOIN title_principal AS p ON p.title_id = t.title_id JOIN name AS n ON n.name_id = p.name_id WHERE t.title = ? AND t.type = 'movie'"},
}

// t5Conn is one thread's connection with the statements prepared.
type t5Conn struct {
	conn  *sql.Conn
	stmts []*sql.Stmt
}

func (c *t5Conn) close() {
	for _, st := range c.stmts {
		st.Close()
	}
	c.conn.Close()
}

// tx runs the transaction for one title and returns the rows read.
func (c *t5Conn) tx(ctx context.Context, title string) (int, error) {
	if _, err := c.conn.ExecContext(ctx, "BEGIN"); err != nil {
		return 0, err
	}
	n := 0
	var err error
	for _, st := range c.stmts {
		var rows *sql.Rows
		if rows, err = st.QueryContext(ctx, title); err != nil {
			break
		}
		var k int
		if k, err = drain(rows); err != nil {
			break
		}
		n += k
	}
	if _, cerr := c.conn.ExecContext(ctx, "COMMIT"); err == nil {
		err = cerr
	}
	return n, err
}

// runTitle5 is the 5-SELECT "title" transaction of the drop-in cache
// benchmark on an IMDb-shaped database: transactions per second, average
// and p95 latency against threads, per path.
func runTitle5(ctx context.Context, r *Runner) error {
	cfg, rep := r.Config, r.Report
	titles := pick(cfg.Scale, 2_000, 35_000, 500_000)
	threads := cfg.clients([]int{1, 4}, []int{1, 4, 16}, []int{1, 2, 4, 8, 16, 32, 64})
	maxThreads := max(1, slices.Max(threads))
	load := cfg.load(Load{
		Warmup:   pick(cfg.Scale, 30*time.Millisecond, time.Second, 5*time.Second),
		Duration: pick(cfg.Scale, 150*time.Millisecond, 3*time.Second, 15*time.Second),
		MinCount: pick(cfg.Scale, 4, 20, 100),
	})
	budget := max(pick(cfg.Scale, 20*time.Second, 2*time.Minute, 10*time.Minute), 10*(load.Warmup+load.Duration))

	rig, err := startSQLRig(ctx, r, "title5", fmt.Sprintf("imdb-%d.sqlite", titles), title5DBName, "chunkd-bench-title5", func(path string) error {
		return gen.IMDb(path, gen.IMDbOptions{Titles: titles, Seed: 1})
	})
	if err != nil {
		return err
	}
	defer rig.close(r)
	// The keys: every movie title, drawn uniformly (not a hot set).
	movies, err := movieTitles(ctx, rig.ds.file)
	if err != nil {
		return err
	}
	err = rig.openPaths(ctx, r, &sqlitevfs.Options{CacheKiB: title5CacheKiB}, map[string]string{
		pathService:    "the warm service (the database's files on its disk) and a client without a memory tier: every page a connection's SQLite cache misses is a request to the service",
		pathServiceMem: "the warm service and a client with its default memory tier (256 MiB, shared by the connections), into which every page was read before measuring",
	}, func(p *sqlPathDB) error {
		// A connection per thread, kept between cases (with its page
		// cache): the pool never closes one.
		p.db.SetMaxOpenConns(maxThreads)
		p.db.SetMaxIdleConns(maxThreads)
		p.db.SetConnMaxLifetime(0)
		p.db.SetConnMaxIdleTime(0)
		return nil
	})
	if err != nil {
		return err
	}

	rig.setEnv(r, fmt.Sprintf("gen.IMDb: %d titles (%d movies, %d distinct movie titles), %d names, seed 1", titles, movies.count, len(movies.titles), titles))
	rep.Env.Set("connections", "one open database per path for the whole run; each thread its own SQLite connection (a sql.DB pool of %d that never closes one), statements prepared per connection; SQLite page cache %d KiB per connection (PRAGMA cache_size=-%d), so at most %d MiB over %d connections",
		maxThreads, title5CacheKiB, title5CacheKiB, maxThreads*title5CacheKiB>>10, maxThreads)
	rep.Env.Set("keys", "a movie title drawn uniformly from all %d distinct movie titles per transaction (not a hot set)", len(movies.titles))
	rep.Env.Set("timing", "per path, thread count and run: warm-up %s, then %s; runs outermost, then thread counts, then paths; a run longer than %s drops that case", load.Warmup, describeLoad(load), budget)
	rep.Env.Set("threads", "%s", intList(threads))

	m, err := measureTitle5(ctx, r, rig.paths, threads, movies.titles, load, budget)
	if err != nil {
		return err
	}
	reportTitle5(rep, rig, threads, m)
	return nil
}

// title5Case is the suite's one case.
const title5Case = "transaction"

// measureTitle5 runs the transaction on every path with each thread
// count, runs outermost, then thread counts, then paths.
func measureTitle5(ctx context.Context, r *Runner, paths []*sqlPathDB, threads []int, titles []string, load Load, budget time.Duration) (*sqlRuns, error) {
	m := newSQLRuns(r.Report, budget)
	for run := 1; run <= r.Config.Runs; run++ {
		for _, th := range threads {
			for _, p := range paths {
				k := caseKey{title5Case, p.name, th}
				if m.failed[k] != nil {
					continue
				}
				conns, err := t5Conns(ctx, p.db, th)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p.name, err)
				}
				l := load
				l.Clients = th
				s, ok, err := m.drive(ctx, run, fmt.Sprintf("%s with %d threads", p.name, th), k, p, l, func(ctx context.Context, w int, rng *rand.Rand) error {
					title := titles[rng.IntN(len(titles))]
					n, err := conns[w].tx(ctx, title)
					if err != nil {
						return p.db.QueryError(err)
					}
					if n == 0 {
						return fmt.Errorf("no rows for movie %q: %w", title, errRows)
					}
					return nil
				})
				for _, c := range conns {
					c.close()
				}
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
				x := s.Stats()
				if th == threads[0] {
					r.Report.Samples(title5Case, p.name, th, s.Lat)
				}
				r.Logf("title5: run %d/%d %-13s %2d threads: %s tps, avg %s ms, p95 %s ms", run, r.Config.Runs, p.name, th, fmtRate(x.Throughput), fmtMS(us(x.Mean)), fmtMS(us(x.P95)))
			}
		}
	}
	return m, nil
}

// reportTitle5 writes the headline, as the cache benchmark reports it,
// the statements and where the pages came from.
func reportTitle5(rep *Report, rig *sqlRig, threads []int, m *sqlRuns) {
	var keys []caseKey
	for _, p := range rig.paths {
		for _, th := range threads {
			keys = append(keys, caseKey{title5Case, p.name, th})
		}
	}
	m.summarize(keys)

	// The headline: tps, average and p95 per thread count and path, with
	// the multiples of local's.
	var b strings.Builder
	b.WriteString("The 5-SELECT \"title\" transaction of the drop-in SQL cache benchmark (a web page about one movie: its row, genres, rating, characters and principal people, each statement looking the movie up by title again) " +
		"on an IMDb-shaped SQLite database, in a closed loop from each thread, every thread with its own SQLite connection. Paths:\n\n")
	rig.describePaths(&b)
	b.WriteString("\nEach path keeps one open database and its connections across thread counts and runs, as an application does; the figures are steady state after the warm-up.\n\n")
	b.WriteString("| threads | path | tps | avg ms | p95 ms | tps × local | avg × local |\n|--:|---|--:|--:|--:|--:|--:|\n")
	for _, th := range threads {
		base, bok := rep.find(title5Case, pathLocal, th)
		for _, p := range rig.paths {
			res, ok := rep.find(title5Case, p.name, th)
			if !ok {
				continue
			}
			tx, ax := "", ""
			if bok {
				tx, ax = ratio(res.Throughput, base.Throughput), ratio(res.MeanUS, base.MeanUS)
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", th, p.name, fmtRate(res.Throughput), fmtMS(res.MeanUS), fmtMS(res.P95US), tx, ax)
		}
	}
	b.WriteString("\n")
	rep.Intro = b.String()

	var q strings.Builder
	q.WriteString("Written for SQLite from the benchmark's published statements; the transaction is BEGIN, the five in this order, COMMIT, on one connection, every row read.\n\n")
	for _, x := range title5Queries {
		fmt.Fprintf(&q, "- %s: `%s`\n", x.name, x.sql)
	}
	rep.Section("Statements", q.String())

	m.setHitRatios(rig.pathNames())
	var w strings.Builder
	w.WriteString("Per transaction, summed over the measured parts of all runs: pages the connections' SQLite caches missed (read through the VFS), and for the chunkd paths the requests the client made to the service (a list or run of pages fetched ahead is one) and the share of those pages each tier served (client.Stats; the service's tier as it reported it).\n\n")
	w.WriteString("| path | threads " + tierTableHeader + "\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	m.pagesTable(&w, keys, func(k caseKey) string { return fmt.Sprintf("| %s | %d |", k.path, k.threads) })
	rep.Section("Where the pages came from", w.String())
	rep.Notef("The clients and the service share this machine's %d cores; with more threads than cores the latencies include waiting for a CPU, on every path.", rep.Env.Cores)
	rep.Notef("A service answer slower than the client's ServiceTimeout (50 ms) is hedged with a store read (the hedged column); under CPU contention that can happen on a warm service.")
}

// movieList is the keys of the transaction.
type movieList struct {
	titles []string // distinct movie titles
	count  int      // movies
}

// movieTitles reads every distinct movie title from the local file.
func movieTitles(ctx context.Context, file string) (movieList, error) {
	var ml movieList
	d, err := openLocalDB(file, nil)
	if err != nil {
		return ml, err
	}
	defer d.close()
	if err := d.QueryRowContext(ctx, "SELECT count(*) FROM title WHERE type = 'movie'").Scan(&ml.count); err != nil {
		return ml, err
	}
	rows, err := d.QueryContext(ctx, "SELECT DISTINCT title FROM title WHERE type = 'movie' ORDER BY title")
	if err != nil {
		return ml, err
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return ml, err
		}
		ml.titles = append(ml.titles, t)
	}
	if err := rows.Err(); err != nil {
		return ml, err
	}
	if len(ml.titles) == 0 {
		return ml, errors.New("the data set has no movies")
	}
	return ml, nil
}

// t5Conns takes n connections of d, each with the statements prepared.
func t5Conns(ctx context.Context, d *sqlDB, n int) ([]*t5Conn, error) {
	var out []*t5Conn
	fail := func(err error) ([]*t5Conn, error) {
		for _, c := range out {
			c.close()
		}
		return nil, err
	}
	for i := 0; i < n; i++ {
		conn, err := d.Conn(ctx)
		if err != nil {
			return fail(err)
		}
		c := &t5Conn{conn: conn}
		out = append(out, c)
		for _, q := range title5Queries {
			st, err := conn.PrepareContext(ctx, q.sql)
			if err != nil {
				return fail(fmt.Errorf("prepare %s: %w", q.name, d.QueryError(err)))
			}
			c.stmts = append(c.stmts, st)
		}
	}
	return out, nil
}
