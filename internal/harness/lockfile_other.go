//go:build !unix

package harness

// lockFile takes no lock where there is no flock: the process's own lock
// (browserMu) is all there is.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
