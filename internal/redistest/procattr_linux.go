package redistest

import "syscall"

// procAttr makes the kernel kill redis-server when the test process dies,
// even by SIGKILL or a test timeout, so no server outlives its tests.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
