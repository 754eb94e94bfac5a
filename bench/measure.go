package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Op is one operation of a load: worker is the client's number (0 to
// clients-1), rng its own random source. It returns an error to stop the
// load.
type Op func(ctx context.Context, worker int, rng *rand.Rand) error

// Load is how a case is driven: clients goroutines in a closed loop, each
// issuing its next operation as soon as the last one returns.
type Load struct {
	Clients  int
	Warmup   time.Duration // operations run and thrown away first
	Duration time.Duration // measured time (when Count is 0)
	Count    int           // if > 0, exactly this many measured operations
	MinCount int           // with Duration: go on past it until this many
	// Mark, if set, is called between the warm-up and the measured part,
	// to read counters that must cover the measured part only.
	Mark func()
}

// Sample is one run of a case: every measured latency, sorted, and the
// wall time the run took.
type Sample struct {
	Lat     []time.Duration // sorted
	Elapsed time.Duration
}

// Drive runs a load: warm-up, then the measured part.
func Drive(ctx context.Context, l Load, op Op) (Sample, error) {
	if l.Clients < 1 {
		l.Clients = 1
	}
	if l.Warmup > 0 {
		if _, err := drive(ctx, l.Clients, l.Warmup, 0, 0, op, false); err != nil {
			return Sample{}, err
		}
	}
	if l.Mark != nil {
		l.Mark()
	}
	return drive(ctx, l.Clients, l.Duration, l.Count, l.MinCount, op, true)
}

func drive(ctx context.Context, clients int, d time.Duration, count, minCount int, op Op, keep bool) (Sample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		started  atomic.Int64 // operations begun (fixed count)
		finished atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	lats := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(d)
	more := func() bool {
		if ctx.Err() != nil {
			return false
		}
		if count > 0 {
			return started.Add(1) <= int64(count)
		}
		return time.Now().Before(deadline) || finished.Load() < int64(minCount)
	}
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(start.UnixNano())))
			var mine []time.Duration
			if keep {
				mine = make([]time.Duration, 0, 1024)
			}
			for more() {
				t0 := time.Now()
				if err := op(ctx, w, rng); err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				if keep {
					mine = append(mine, time.Since(t0))
				}
				finished.Add(1)
			}
			lats[w] = mine
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Sample{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	var all []time.Duration
	if keep {
		n := 0
		for _, l := range lats {
			n += len(l)
		}
		all = make([]time.Duration, 0, n)
		for _, l := range lats {
			all = append(all, l...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	}
	return Sample{Lat: all, Elapsed: elapsed}, nil
}

// Stats are one run's figures.
type Stats struct {
	Count      int64
	Mean       time.Duration
	P50        time.Duration
	P95        time.Duration
	P99        time.Duration
	Throughput float64 // operations per second
}

// Stats computes a run's figures: nearest-rank percentiles of the sorted
// latencies, and throughput as operations over wall time.
func (s Sample) Stats() Stats {
	n := len(s.Lat)
	if n == 0 {
		return Stats{}
	}
	var sum time.Duration
	for _, d := range s.Lat {
		sum += d
	}
	st := Stats{
		Count: int64(n),
		Mean:  sum / time.Duration(n),
		P50:   Percentile(s.Lat, 50),
		P95:   Percentile(s.Lat, 95),
		P99:   Percentile(s.Lat, 99),
	}
	if s.Elapsed > 0 {
		st.Throughput = float64(n) / s.Elapsed.Seconds()
	}
	return st
}

// Percentile returns the nearest-rank p-th percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// median returns the median of xs (the mean of the middle two for an
// even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Summarize folds the runs of one case into a Result: each figure is the
// median over the runs, and SpreadPct is (max-min)/median of the runs'
// p50s, in percent.
func Summarize(suite, cs, path string, threads int, runs []Stats) Result {
	r := Result{Suite: suite, Case: cs, Path: path, Threads: threads, Runs: len(runs)}
	if len(runs) == 0 {
		return r
	}
	col := func(f func(Stats) float64) float64 {
		xs := make([]float64, len(runs))
		for i, s := range runs {
			xs[i] = f(s)
		}
		return median(xs)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	r.Count = int64(math.Round(col(func(s Stats) float64 { return float64(s.Count) })))
	r.MeanUS = col(func(s Stats) float64 { return us(s.Mean) })
	r.P50US = col(func(s Stats) float64 { return us(s.P50) })
	r.P95US = col(func(s Stats) float64 { return us(s.P95) })
	r.P99US = col(func(s Stats) float64 { return us(s.P99) })
	r.Throughput = col(func(s Stats) float64 { return s.Throughput })
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range runs {
		v := us(s.P50)
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if r.P50US > 0 {
		r.SpreadPct = (hi - lo) / r.P50US * 100
	}
	return r
}
