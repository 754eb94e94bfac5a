package folder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// fileLock is an exclusive lock shared by the goroutines of this process
// (a one-slot semaphore, so waiting honours contexts) and by other
// processes (an OS lock on a lock file, where the platform has one).
type fileLock struct {
	path string
	sem  chan struct{}

	mu sync.Mutex // guards f
	f  *os.File   // opened on first use, so read-only folders work
}

func newFileLock(path string) *fileLock {
	return &fileLock{path: path, sem: make(chan struct{}, 1)}
}

// pollLock is how long lock waits between tries while another process
// holds the lock file.
const pollLock = time.Millisecond

// lock takes the lock, waiting until it is free or ctx is done, and
// returns the function that releases it.
func (l *fileLock) lock(ctx context.Context) (func(), error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release := func() { <-l.sem }
	f, err := l.file()
	if err != nil {
		release()
		return nil, err
	}
	wait := pollLock
	for {
		ok, err := tryLockFile(f)
		if err != nil {
			release()
			return nil, fmt.Errorf("lock %s: %w", l.path, err)
		}
		if ok {
			return func() {
				unlockFile(f)
				release()
			}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			release()
			return nil, ctx.Err()
		}
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

func (l *fileLock) file() (*os.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		// Writes take the lock first: the store's directory is made here
		// when it does not exist yet (see New).
		if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		l.f = f
	}
	return l.f, nil
}

func (l *fileLock) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
