//go:build unix

package harness

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile waits for an exclusive lock on the file at path (made if
// missing) and returns its release. The lock goes with the process if it
// dies.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}
