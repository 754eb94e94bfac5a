package tablefile

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"runtime"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// bigTable builds a table file of n small chunks in memory, once per size.
var bigTables = map[int][]byte{}

func bigTable(b *testing.B, n int) ([]byte, []addr.Addr) {
	b.Helper()
	addrs := make([]addr.Addr, n)
	data, ok := bigTables[n]
	var w *Writer
	var buf bytes.Buffer
	if !ok {
		w = NewWriter(&buf)
	}
	chunk := make([]byte, 16)
	for i := range addrs {
		binary.BigEndian.PutUint64(chunk, uint64(i))
		addrs[i] = addr.Of(chunk)
		if w != nil {
			if err := w.AddWithAddr(addrs[i], chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	if w != nil {
		if _, err := w.Finish(); err != nil {
			b.Fatal(err)
		}
		data = buf.Bytes()
		bigTables[n] = data
	}
	return data, addrs
}

const million = 1_000_000

// BenchmarkLookup measures index lookups of present addresses in a
// 1,000,000-chunk file (reported as lookups/s), and in a 10,000-chunk one
// whose index fits in cache, to separate CPU cost from memory latency.
func BenchmarkLookup(b *testing.B) {
	b.Run("1M", func(b *testing.B) { benchLookup(b, million) })
	b.Run("10K", func(b *testing.B) { benchLookup(b, 10_000) })
}

func benchLookup(b *testing.B, n int) {
	data, addrs := bigTable(b, n)
	tab, err := Open(bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewSource(1))
	shuffled := append([]addr.Addr(nil), addrs...)
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := tab.Lookup(shuffled[i%len(shuffled)]); !ok {
			b.Fatal("missing")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkLookupAbsent measures lookups of absent addresses, which the
// bloom filter mostly answers alone.
func BenchmarkLookupAbsent(b *testing.B) {
	data, _ := bigTable(b, million)
	tab, err := Open(bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		b.Fatal(err)
	}
	absent := make([]addr.Addr, 1<<16)
	for i := range absent {
		absent[i] = addr.Of([]byte{byte(i), byte(i >> 8), 'x'})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if tab.Has(absent[i&(len(absent)-1)]) {
			b.Fatal("found absent")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkOpenIndex measures opening a 1,000,000-chunk file's index and
// building its bloom filter, and reports the memory held per chunk.
func BenchmarkOpenIndex(b *testing.B) {
	data, _ := bigTable(b, million)
	var tab *Table
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		tab, err = Open(bytes.NewReader(data), int64(len(data)), nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tab.MemSize())/million, "index+bloom-B/chunk")
	b.ReportMetric(float64(tab.Bloom().MemSize())/million, "bloom-B/chunk")
	// Cross-check MemSize with the heap: open one more and measure.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	keep, _ := Open(bytes.NewReader(data), int64(len(data)), nil)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/million, "heap-B/chunk")
	runtime.KeepAlive(keep)
}

// BenchmarkBloomFalsePositive reports the filter's false-positive rate on
// 1,000,000 absent addresses, and the cost of one test.
func BenchmarkBloomFalsePositive(b *testing.B) {
	_, addrs := bigTable(b, million)
	f := NewBloom(len(addrs), DefaultBloomBitsPerKey)
	for _, a := range addrs {
		f.Add(a)
	}
	fp := 0
	const probes = million
	for i := 0; i < probes; i++ {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(i))
		if f.MayContain(addr.Of(append(buf[:], 'z'))) {
			fp++
		}
	}
	probe := addrs[0]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		probe[19] = byte(i)
		f.MayContain(probe)
	}
	b.ReportMetric(100*float64(fp)/probes, "fp-%")
}

// BenchmarkGetLocal reads random 4 KiB chunks from an in-memory file.
func BenchmarkGetLocal(b *testing.B) {
	r := rand.New(rand.NewSource(2))
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var addrs []addr.Addr
	for i := 0; i < 2000; i++ {
		c := make([]byte, 4096)
		r.Read(c[:2048])
		a, _ := w.Add(c)
		addrs = append(addrs, a)
	}
	w.Finish()
	tab, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tab.Get(addrs[i%len(addrs)]); err != nil {
			b.Fatal(err)
		}
	}
}
