//go:build !linux

package redistest

import "syscall"

// procAttr has nothing to add where there is no parent-death signal: a
// server outlives a test process that is killed.
func procAttr() *syscall.SysProcAttr { return nil }
