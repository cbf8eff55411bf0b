package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// children is the set of worker processes (redmap's and the baselines') alive
// now, whose CPU time measure adds up.
type children struct {
	mu   sync.Mutex
	pids map[int]bool
}

func (c *children) add(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pids == nil {
		c.pids = map[int]bool{}
	}
	c.pids[pid] = true
}

func (c *children) remove(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pids, pid)
}

// cpu returns the CPU time (user and system) the live worker processes have
// used so far, by pid.
func (c *children) cpu() map[int]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]time.Duration{}
	for pid := range c.pids {
		out[pid] = procCPU(pid)
	}
	return out
}

// workerCPU returns the CPU the worker processes alive at both readings
// used between them.
func workerCPU(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU reads a process's user and system time from /proc (0 where there
// is none).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * clockTick
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
