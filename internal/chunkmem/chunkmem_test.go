package chunkmem

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// The cache keeps its bound, and its upkeep starts no goroutine: reads and
// writes, hits and misses, run it themselves.
func TestUpkeepInline(t *testing.T) {
	const max = 1 << 20
	c, err := New(max)
	if err != nil {
		t.Fatal(err)
	}
	defer c.StopAllGoroutines()
	data := make([]byte, 4096)
	key := func(i int) addr.Addr { return addr.Of([]byte{byte(i), byte(i >> 8), byte(i >> 16)}) }
	runtime.GC() // its workers are started once, now, not in the loop
	before := goroutinesCreated()
	n := 10 * max / len(data)
	for i := range n {
		c.Set(key(i), data)
		c.GetIfPresent(key(i / 2))
	}
	// Otter's default starts one for about every 40 writes here (120 for
	// these); a garbage collection may start its workers (GOMAXPROCS).
	if created := goroutinesCreated() - before; created > uint64(runtime.GOMAXPROCS(0)) {
		t.Errorf("%d goroutines started for %d writes and reads", created, 2*n)
	}
	if w := c.WeightedSize(); w > max || w < max/2 {
		t.Errorf("the cache weighs %d, bound %d", w, max)
	}
	if _, err := New(0); err == nil {
		t.Error("a cache of 0 bytes was made")
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
