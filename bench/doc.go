// Package bench holds chunkd's benchmark suites and the reports they
// write. The chunkd binary runs them:
//
//	chunkd bench disk    --scale small --out /tmp/bench-disk
//	chunkd bench chunks  --scale small --out /tmp/bench-chunks
//	chunkd bench bigdata --scale small --out /tmp/bench-bigdata
//	chunkd bench sql     --scale small --out /tmp/bench-sql
//	chunkd bench sysbench --scale small --out /tmp/bench-sysbench
//	chunkd bench title5  --scale small --out /tmp/bench-title5
//	chunkd bench clone   --scale small --out /tmp/bench-clone
//	chunkd bench -h      # every flag, and the registered suites
//
// (or "go run ./cmd/chunkd bench ..." from the repository). --scale small
// finishes in a few minutes on 2 cores and is what CI's smoke run uses;
// --scale large is for real figures. --runs, --duration, --warmup,
// --count, --clients and --sizes override the scale's defaults; --rtt and
// --bandwidth set the emulated store's round trip and throughput cap;
// --store-direct adds the slow store-direct path to sysbench and title5.
//
// # What a run writes
//
// Every suite writes into --out:
//
//   - report.md: what was measured, the environment block, one table per
//     case (path, clients, count, p50, p95, p99, mean, throughput, the
//     multipliers against the suite's baseline path, spread), the
//     articles' side-by-side table of median latencies with multipliers,
//     the suite's own tables, notes and caveats, and the plots.
//   - results.csv: suite,case,path,threads,count,mean_us,p50_us,p95_us,
//     p99_us,throughput,runs,spread_pct — one row per case, path and
//     thread count (clients, or queue depth for disk). Throughput is
//     operations (IOPS for disk) per second.
//   - metrics.csv: suite,case,path,threads,metric,value — figures that
//     are not latencies: disk reads per read, bytes per read, hit ratios.
//   - environment.json: the environment block (see Environment): CPU and
//     cores, memory, OS and kernel, the cache dir's file system, mount and
//     block device, fsync, the store and its emulated round trip, data-set
//     and cache sizes, hit ratios per tier, how the service ran and under
//     which memory limit, chunkd's version and commit, Go's version, the
//     date, the load average before and after, and the exact command line.
//   - PNG plots (gonum.org/v1/plot): latency (p50 solid, p99 dashed) and
//     throughput against clients for each case with more than one client
//     count, and a latency histogram per path on log-spaced bins.
//
// # How figures are computed
//
// A case is one path at one client count (one chunk or block size is one
// "case" in the tables). Each run of a case drives clients goroutines in
// a closed loop (each issues its next operation when the last returns):
// first a warm-up whose operations are thrown away, then the measured
// part, for a fixed duration (and at least a minimum count, for the slow
// paths) or a fixed --count. Latency is each operation's wall time on the
// client's side; percentiles are nearest-rank over the run's operations;
// throughput is the run's operations over its wall time. There are
// --runs runs (default 3) and every figure in the tables and the CSV is
// the median over them; spread_pct is (max − min) / median of the runs'
// p50s, in percent: a large spread means the machine was noisy. Runs are
// outermost — run 1 of every path and client count, then run 2 — so
// drift on a shared machine falls on all paths alike, and comparisons are
// side by side within one report (the articles' point: one environment,
// a baseline, multipliers).
//
// # The suites
//
// disk is the smell test of the disk under the cache dir, before any
// chunkd figure: random reads of 4, 16 and 32 KiB at block-aligned
// offsets of a test file of random bytes (256 MiB small, 4 GiB large) in
// the cache dir's file system, at queue depth 1 and 16 (16 goroutines,
// each with one pread in flight, like fio's psync engine with
// numjobs=16), with O_DIRECT and aligned buffers (the device) and through
// the page cache (dropped for the file before each run, like fio's
// invalidate=1). Where the file system refuses O_DIRECT (tmpfs, some
// overlays) only buffered reads are measured, and the report says so.
// With --fio, and fio installed, fio runs the same cases instead.
//
// chunks measures GetChunk per path with the service in this process
// (server.New, net/http and gRPC on 127.0.0.1:0): bare-http (a bare HTTP
// server returning the same bytes: the floor and the baseline),
// http-memory (memory hits), http-disk (the whole file on local disk, no
// memory tier: one pread per chunk), http-miss (a fresh cache dir over a
// store with an emulated round trip, --rtt 30ms, whose download is held
// back so every request reads through) and store-direct (tablefile over
// store.ReaderAt with the same round trip: a client reading the store
// itself). --api grpc or both adds the grpc-* paths. Clients 1, 4, 8, 16
// (small) up to 64 (large); chunk sizes 16 KiB (small) or 4, 16, 64 KiB.
// It also reports the disk reads a disk-served chunk costs: the read
// syscalls of this process (/proc/self/io syscr) per request on the disk
// path less those on the memory path, the same difference in bytes
// (rchar) over the record size, and the service's own counter.
//
// chunks also measures chunkd against what a user who only wants bytes
// near the database would run instead: serve-memory is a "chunkd serve"
// child (this binary, or --binary) with every chunk in memory, a process
// of its own; nginx-cache is nginx (found on PATH or at /usr/sbin/nginx,
// with the slice module; skipped with a note otherwise) as a caching
// reverse proxy (proxy_cache on disk, slice 1m, 2 workers) in front of an
// origin in this process that answers each range with one ranged read of
// the store (with --rtt). The bench writes nginx's config, cache, logs
// and pid file in its work dir and runs it in the foreground (-p, -c);
// it never touches /etc/nginx or a system service. nginx's cache is warm
// (every range read twice, every measured answer a HIT), and a client asks
// it for a chunk's stored record as a byte range: compressed and
// unverified, where chunkd sends the decoded chunk proven to hash to its
// address; nginx-same-size asks for as many bytes as chunkd sends, to
// tell bytes from serving. The section "chunkd vs nginx proxy_cache"
// gives the ratios of the goals (chunkd's p50 at 1 client at or below
// nginx's, its throughput at 8 clients at or above, per run and as
// medians), and the CPU, read and write calls and bytes written per
// request of each server's own processes (/proc/PID/stat and io), with
// this process's CPU per request on every path. On a machine shared with
// other work, ops/s also measures the share of the cores a path's
// processes got (the in-process paths are one process; serve-memory and
// nginx add their own), so the section also gives requests per CPU
// second of all of a path's processes, which does not depend on it.
//
// bigdata is YugabyteDB's uncached random-read test at our scale: a data
// set of table files several times the memory the service is given
// (small: 512 MiB of files, --mem 64 MiB; large: 8 GiB, 1 GiB), written
// file by file into a folder store, downloaded by a "chunkd serve" child
// process (this binary, or one built with go build), dropped from the
// page cache, then read by many clients at uniformly random addresses.
// The child runs in a memory cgroup made under this process's own cgroup
// (v2 if its memory controller is delegable, else v1; limit 2 × mem + 64
// MiB, page cache included, with GOMEMLIMIT a little under it), so the
// data set cannot hide in the page cache; if no cgroup is writable the
// report says the limit was --mem only. Per client count it reports
// ops/s, average and p99 latency, the hit ratio per tier, and disk reads
// per read, goal 1.00 (every index and bloom filter is in memory): the
// child's read syscalls (/proc/PID/io syscr) less those per request of a
// memory-hit baseline on a small hot set, over the chunks served from
// disk. Go's HTTP server makes a varying number of socket reads per
// request (a background read that a fast handler often ends before it is
// issued, and reads that find no next request yet), so for single GETs
// this difference overstates by up to half a read; the headline figure
// therefore comes from batches of 64 random addresses per request (POST,
// GetChunks), where those socket reads are spread over some 60 disk reads.
// Alongside: the same difference in bytes (rchar) over the record size,
// the service's own counter, and read_bytes (what the block layer
// fetched) per disk-served read. It checks free disk space first: the
// data set is on disk twice (the store's copy and the cache's).
//
// # Adding a suite
//
// A suite implements Suite (Name, Synopsis, Run) and calls Register from
// an init function; "chunkd bench -h" lists it. Run gets a Runner with
// the Config (zero fields take the scale's defaults: use pick), the
// Report to fill (Add a Result per case, path and thread count — usually
// from Summarize over the runs' Stats; Metric, Section, Notef, Samples
// for histograms; Env.Set for the suite's facts) and a WorkDir for
// scratch files. Drive runs a Load (clients, warm-up, duration or count)
// of an Op and returns the sorted latencies; the package writes the
// report files when Run returns, also after an error, with the cases
// that finished.
package bench
