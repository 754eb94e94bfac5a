//go:build !linux

package bench

import (
	"errors"
	"os"
	"os/exec"
)

func statFS(dir string) (string, int64) { return "", 0 }

func freeBytes(dir string) int64 { return -1 }

func uname() string { return "" }

func openDirect(name string) (*os.File, error) {
	return nil, errors.New("O_DIRECT is not supported on this system")
}

func dropCache(name string) error { return errors.New("not supported on this system") }

func killWithParent(cmd *exec.Cmd) {}

func intoCgroup(cmd *exec.Cmd, fd int) {}

func adviseRandom(f *os.File) error { return nil }

func deviceOf(fi os.FileInfo) uint64 { return 0 }

func ownProcessGroup(cmd *exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) { cmd.Process.Kill() }
