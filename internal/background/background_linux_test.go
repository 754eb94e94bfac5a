//go:build linux

package background

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestRun: fn runs on a thread under SCHED_IDLE (or nice 19 where that
// is refused), and the caller's thread keeps its policy.
func TestRun(t *testing.T) {
	var policy uint32
	var nice int
	var err error
	Run(func() {
		var a *unix.SchedAttr
		if a, err = unix.SchedGetAttr(0, 0); err == nil {
			policy, nice = a.Policy, int(a.Nice)
		}
	})
	if err != nil {
		t.Skipf("no sched_getattr here: %v", err)
	}
	if policy != unix.SCHED_IDLE && nice != 19 {
		t.Fatalf("fn ran with policy %d, nice %d; want SCHED_IDLE or nice 19", policy, nice)
	}
	if a, err := unix.SchedGetAttr(0, 0); err == nil && a.Policy == unix.SCHED_IDLE {
		t.Fatal("the caller's thread was lowered too")
	}
}
