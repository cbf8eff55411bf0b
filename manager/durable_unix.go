//go:build unix

package manager

import (
	"errors"
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
