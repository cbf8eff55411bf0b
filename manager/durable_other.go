//go:build !unix

package manager

// processAlive reports whether process pid of this host runs; where it
// cannot tell, it says so, and a crashed holder's claim lapses by itself.
func processAlive(int) bool { return true }

// pidNamespace names this process's PID namespace, where it can tell: ""
// here.
func pidNamespace() string { return "" }
