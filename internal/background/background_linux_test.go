//go:build linux

package background

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadPriority reads the nice value and scheduling policy of the
// calling thread from /proc.
func threadPriority(t *testing.T) (nice, policy int) {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	return statPriority(t, b)
}

// statPriority reads the nice value and scheduling policy from a
// /proc/…/stat line: after the command (which may hold spaces) in
// parentheses, nice is the 19th field of the line and policy the 41st.
func statPriority(t *testing.T, b []byte) (nice, policy int) {
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	nice, err := strconv.Atoi(f[16])
	if err == nil {
		policy, err = strconv.Atoi(f[38])
	}
	if err != nil {
		t.Fatal(err)
	}
	return nice, policy
}

// TestRun: fn runs on a thread under SCHED_IDLE, the caller's thread
// keeps its policy, and the lowered thread exits with fn's goroutine: soon
// none of the process's threads is left in the background for other
// goroutines to run on.
func TestRun(t *testing.T) {
	ran := false
	var nice, policy int
	Run(func() {
		ran = true
		nice, policy = threadPriority(t)
	})
	if !ran || policy != unix.SCHED_IDLE {
		t.Fatalf("ran %v under policy %d at nice %d, want SCHED_IDLE (%d)", ran, policy, nice, unix.SCHED_IDLE)
	}
	if _, p := threadPriority(t); p == unix.SCHED_IDLE {
		t.Fatal("the caller's thread was lowered too")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := reniced(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v still in the background", left)
		}
		time.Sleep(time.Millisecond)
	}
}

// A thread kept in the background longer than its idle time goes from
// SCHED_IDLE to nice 19, which has a share of a busy host's cores. The
// kernel sets the policy, then the nice value, and /proc reads them
// without a lock: a read between the two finds SCHED_NORMAL at nice 0,
// so the test waits for both.
func TestRunRaised(t *testing.T) {
	var nice, policy int
	runFor(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if nice, policy = threadPriority(t); policy == unix.SCHED_NORMAL && nice == 19 || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}, 10*time.Millisecond)
	if policy != unix.SCHED_NORMAL || nice != 19 {
		t.Fatalf("after its idle time: policy %d at nice %d, want SCHED_NORMAL (%d) at 19", policy, nice, unix.SCHED_NORMAL)
	}
}

// reniced lists the process's threads at nice 19 or under SCHED_IDLE.
func reniced(t *testing.T) []string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if nice, policy := statPriority(t, b); nice == 19 || policy == unix.SCHED_IDLE {
			left = append(left, task.Name())
		}
	}
	return left
}
