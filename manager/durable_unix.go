//go:build unix

package manager

import (
	"errors"
	"os"
	"syscall"
)

// processAlive reports whether process pid of this host runs: signal 0
// checks without signalling (EPERM: it runs, as another user).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // not a process we can check: assume it lives
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pidNamespace names this process's PID namespace ("pid:[4026531836]"), so
// that a holder's pid is checked only from its own namespace: two
// containers may share a host name, and not their pids. "" if unknown.
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}
