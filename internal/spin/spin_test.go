package spin

import (
	"os"
	"testing"
	"time"
)

// TestMain lets no yield count as busy, but in TestWaitBusy: the machine
// that runs the tests may well be busy.
func TestMain(m *testing.M) {
	busyYield = time.Hour
	os.Exit(m.Run())
}

func TestWaitReady(t *testing.T) {
	p := Policy{Max: time.Hour} // capped at MaxMax: ample for three polls
	calls := 0
	if !p.Wait(func() bool { calls++; return calls == 3 }) {
		t.Fatal("Wait gave up on bytes that came on the third poll")
	}
	if calls != 3 || p.Stats().Ready.Load() != 1 {
		t.Fatalf("calls %d, ready %d: want 3 and 1", calls, p.Stats().Ready.Load())
	}
}

// TestWaitFor: a limit ends a poll before Max.
func TestWaitFor(t *testing.T) {
	p := Policy{Max: time.Hour}
	start := time.Now()
	if p.WaitFor(time.Millisecond, func() bool { return false }) {
		t.Fatal("WaitFor reported bytes that never came")
	}
	if took := time.Since(start); took < time.Millisecond || took > MaxMax {
		t.Fatalf("a poll limited to 1ms took %v", took)
	}
}

func TestWaitNever(t *testing.T) {
	for name, p := range map[string]*Policy{"nil": nil, "negative": {Max: -1}} {
		if p.Wait(func() bool { t.Errorf("%s: polled", name); return true }) {
			t.Errorf("%s: Wait reported bytes without polling", name)
		}
	}
}

// TestWaitExpires: a poll that finds nothing ends after Max, and a run of
// them stops polling for skipFor waits, then polling starts again.
func TestWaitExpires(t *testing.T) {
	p := Policy{Max: 200 * time.Microsecond}
	for i := 0; i < failRun; i++ {
		start := time.Now()
		if p.Wait(func() bool { return false }) {
			t.Fatal("Wait reported bytes that never came")
		}
		if took := time.Since(start); took < p.Max {
			t.Fatalf("poll %d ended after %v, before Max (%v)", i, took, p.Max)
		}
	}
	for i := 0; i < skipFor; i++ {
		if p.Wait(func() bool { t.Fatalf("wait %d after %d expiries polled", i, failRun); return true }) {
			t.Fatal("a skipped wait reported bytes")
		}
	}
	if !p.Wait(func() bool { return true }) {
		t.Fatal("polling did not start again after the skipped waits")
	}
	st := p.Stats()
	if st.Expired.Load() != failRun || st.Skipped.Load() != skipFor || st.Ready.Load() != 1 {
		t.Fatalf("expired %d skipped %d ready %d, want %d %d 1", st.Expired.Load(), st.Skipped.Load(), st.Ready.Load(), failRun, skipFor)
	}
}

// TestWaitAlone: a waiter polls only while it is the only work in
// progress, and stops polling when other work begins.
func TestWaitAlone(t *testing.T) {
	p := Policy{Max: time.Hour}
	p.Begin() // other work
	if p.Wait(func() bool { t.Error("polled beside other work"); return true }) {
		t.Error("a wait beside other work reported bytes")
	}
	p.End()
	calls := 0
	if p.Wait(func() bool {
		if calls++; calls == 3 {
			p.Begin() // other work begins during the poll
		}
		return false
	}) {
		t.Fatal("Wait reported bytes that never came")
	}
	if calls != 3 || p.Stats().Busy.Load() != 1 || p.Stats().Skipped.Load() != 1 {
		t.Fatalf("polled %d times, busy %d, skipped %d: want 3, 1, 1", calls, p.Stats().Busy.Load(), p.Stats().Skipped.Load())
	}
}

// TestWaitBusy: a yield that took long ends the poll after one more look.
func TestWaitBusy(t *testing.T) {
	defer func(d time.Duration) { busyYield = d }(busyYield)
	busyYield = 0 // every yield counts as busy
	p := Policy{Max: time.Hour}
	calls := 0
	if p.Wait(func() bool { calls++; return false }) {
		t.Fatal("Wait reported bytes that never came")
	}
	if calls != 2 || p.Stats().Busy.Load() != 1 {
		t.Fatalf("polled %d times, busy %d: want 2 and 1", calls, p.Stats().Busy.Load())
	}
}
