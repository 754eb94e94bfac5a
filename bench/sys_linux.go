package bench

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// statFS returns the file system's type (statfs f_type, in hex) and the
// bytes free for an unprivileged user.
func statFS(dir string) (string, int64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", 0
	}
	return fmt.Sprintf("0x%x", st.Type), int64(st.Bavail) * st.Bsize
}

// freeBytes returns the bytes free on dir's file system, or -1.
func freeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// uname returns "sysname release version machine", as uname -srvm prints.
func uname() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " +
		unix.ByteSliceToString(u.Version[:]) + " " + unix.ByteSliceToString(u.Machine[:])
}

// openDirect opens name for reading with O_DIRECT.
func openDirect(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECT, 0)
}

// dropCache asks the kernel to drop a file's clean pages from the page
// cache (posix_fadvise DONTNEED), after syncing its dirty ones. Only this
// file is affected.
func dropCache(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// killWithParent makes the child die if this process does.
func killWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// intoCgroup makes a cgroup v2 child start inside the cgroup whose
// directory is open as fd.
func intoCgroup(cmd *exec.Cmd, fd int) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
}

// adviseRandom tells the kernel reads of f will be random (no readahead),
// as fio does for random workloads (fadvise_hint).
func adviseRandom(f *os.File) error {
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
}

// deviceOf returns the device number of a file's file system.
func deviceOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}

// ownProcessGroup starts the child in a process group of its own, so that
// killProcessGroup ends it with every process it forked.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killProcessGroup kills the process group of a child started with
// ownProcessGroup.
func killProcessGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
