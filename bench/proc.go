package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// procIO is a process's I/O counters from /proc/PID/io.
type procIO struct {
	Rchar     int64 // bytes read by read-like calls (page cache included)
	Syscr     int64 // read-like system calls: read, pread, readv, ... (sockets too)
	ReadBytes int64 // bytes the process made the block layer fetch (real device reads)
	Wchar     int64 // bytes written by write-like calls (sendfile's too)
	Syscw     int64 // write-like system calls: write, writev, sendfile, ... (sockets too)
}

// readProcIO reads /proc/PID/io; pid "self" is this process.
func readProcIO(pid string) (procIO, error) {
	raw, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return procIO{}, err
	}
	var io procIO
	found := 0
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "rchar":
			io.Rchar, found = n, found+1
		case "syscr":
			io.Syscr, found = n, found+1
		case "read_bytes":
			io.ReadBytes, found = n, found+1
		case "wchar":
			io.Wchar, found = n, found+1
		case "syscw":
			io.Syscw, found = n, found+1
		}
	}
	if found < 5 {
		return io, fmt.Errorf("/proc/%s/io: missing counters", pid)
	}
	return io, nil
}

func (a procIO) sub(b procIO) procIO {
	return procIO{a.Rchar - b.Rchar, a.Syscr - b.Syscr, a.ReadBytes - b.ReadBytes, a.Wchar - b.Wchar, a.Syscw - b.Syscw}
}

// promSample is one scraped sample: name{labels} value.
type promSamples map[string]float64

// scrapeMetrics reads a Prometheus text exposition from url.
func scrapeMetrics(ctx context.Context, hc *http.Client, url string) (promSamples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := promSamples{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// tiers are the service's tiers, in report order.
var tiers = []string{"memory", "disk", "partial", "store"}

// hits returns chunks served per tier.
func (p promSamples) hits() map[string]float64 {
	m := map[string]float64{}
	for _, t := range tiers {
		m[t] = p[`chunkd_chunk_hits_total{tier="`+t+`"}`]
	}
	return m
}

// diskReads returns the service's own count of reads of cached files.
func (p promSamples) diskReads() float64 { return p["chunkd_disk_reads_total"] }

// tierCounts accumulate chunks served per tier over measured phases.
type tierCounts map[string]float64

func (t tierCounts) add(after, before promSamples) {
	a, b := after.hits(), before.hits()
	for _, k := range tiers {
		t[k] += a[k] - b[k]
	}
}

func (t tierCounts) total() float64 {
	var n float64
	for _, v := range t {
		n += v
	}
	return n
}

// String renders the hit ratios: "memory 12.5%, disk 87.5%".
func (t tierCounts) String() string {
	n := t.total()
	if n == 0 {
		return "no chunks served"
	}
	var parts []string
	for _, k := range tiers {
		if t[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", k, t[k]/n*100))
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (of %.0f chunks)", n)
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// procStat returns the fields of /proc/PID/stat after the command name:
// [0] is the state (field 3 in proc(5)), [1] the parent's pid, [11] and
// [12] user and system time in clock ticks.
func procStat(pid string) ([]string, error) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(raw), ')') // the name may hold spaces and parentheses
	if i < 0 {
		return nil, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// processCPU returns the CPU time (user and system) a process has used;
// pid "self" is this process. Its resolution is a clock tick (10 ms).
func processCPU(pid string) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%s/stat: bad CPU time %q", pid, s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// childPIDs returns the processes whose parent is pid.
func childPIDs(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := procStat(e.Name()); err == nil && f[1] == want {
			out = append(out, n)
		}
	}
	return out
}
