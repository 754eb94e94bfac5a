package spin

import "syscall"

// yield gives the CPU to another runnable thread on it, if there is one.
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
