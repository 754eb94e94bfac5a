package server

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadNice reads the calling thread's nice value from /proc.
func threadNice(t *testing.T) int {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command (which may hold spaces) in parentheses;
	// nice is the 19th field of the line, the 17th after the command.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInBackground(t *testing.T) {
	ran := false
	var nice int
	inBackground(func() {
		ran = true
		nice = threadNice(t)
	})
	if !ran || nice != 19 {
		t.Fatalf("ran %v at nice %d, want 19", ran, nice)
	}
	// The reniced thread exits with its goroutine (just after fn returns):
	// soon none of the process's threads is left at nice 19 for other
	// goroutines to run on.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := reniced(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v still at nice 19", left)
		}
		time.Sleep(time.Millisecond)
	}
}

// reniced lists the process's threads at nice 19.
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
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); f[16] == "19" {
			left = append(left, task.Name())
		}
	}
	return left
}
