package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/redistest"
)

// Proc is a process a test started: its stdout and stderr are read line by
// line, and it is killed, if still running, when the test ends.
type Proc struct {
	Cmd    *exec.Cmd
	ID     string      // a worker's id, once Expect read it
	out    chan string // stdout, line by line
	logs   chan string // stderr, line by line (the newest dropped if nobody reads)
	exited chan struct{}
	err    error // Wait's, once exited is closed

	tailMu sync.Mutex
	tail   []string // the last stderr lines, shown if the test fails
}

// tailLines is how many of its last stderr lines a Proc keeps.
const tailLines = 50

// Start starts cmd for t (dying with the test process if it dies); under
// go test -short it skips t instead (see redistest.Slow).
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	redistest.Slow(t)
	redistest.DieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, out: make(chan string, 64), logs: make(chan string, 256), exited: make(chan struct{})}
	// With REDMAP_TEST_LOGDIR set (a chaos run's post-mortem), every stderr
	// line is kept there too, one file a process.
	var logFile *os.File
	if dir := os.Getenv("REDMAP_TEST_LOGDIR"); dir != "" {
		if logFile, err = os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", filepath.Base(cmd.Path), cmd.Process.Pid))); err != nil {
			t.Logf("REDMAP_TEST_LOGDIR: %v; this process's stderr is not kept", err)
		}
	}
	var read sync.WaitGroup
	read.Add(2)
	go func() {
		defer read.Done()
		lines(stdout, p.out, nil)
	}()
	go func() {
		defer read.Done()
		if logFile != nil {
			defer logFile.Close()
		}
		lines(stderr, p.logs, func(l string) {
			if logFile != nil {
				fmt.Fprintln(logFile, time.Now().Format("15:04:05.000"), l)
			}
			p.tailMu.Lock()
			p.tail = append(p.tail, l)
			if len(p.tail) > tailLines {
				p.tail = p.tail[1:]
			}
			p.tailMu.Unlock()
		})
	}()
	go func() {
		read.Wait()
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range p.out {
		}
		<-p.exited
		if t.Failed() {
			p.tailMu.Lock()
			t.Logf("the last stderr lines of %s:\n%s", p.name(), strings.Join(p.tail, "\n"))
			p.tailMu.Unlock()
		}
	})
	return p
}

// lines sends r's lines to ch, then closes it. With keep (stderr), a line
// nobody has room for is dropped rather than stalling the process, and keep
// sees every line.
func lines(r io.Reader, ch chan<- string, keep func(string)) {
	defer close(ch)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if keep == nil {
			ch <- sc.Text()
			continue
		}
		keep(sc.Text())
		select {
		case ch <- sc.Text():
		default:
		}
	}
	io.Copy(io.Discard, r)
}

// Expect returns the rest of the next stdout line that starts with prefix,
// skipping others; it fails the test if the process exits first or prints
// none within a minute (or redistest.WaitLimit, if longer). Expect(t,
// "worker ") also sets ID.
func (p *Proc) Expect(t testing.TB, prefix string) string {
	t.Helper()
	timeout := time.After(max(time.Minute, redistest.WaitLimit(t)))
	for {
		select {
		case line, ok := <-p.out:
			if !ok {
				t.Fatalf("%s exited before printing %q", p.name(), prefix)
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				rest = strings.TrimSpace(rest)
				if prefix == "worker " {
					p.ID = rest
				}
				return rest
			}
		case <-timeout:
			t.Fatalf("%s printed no %q within %v", p.name(), prefix, max(time.Minute, redistest.WaitLimit(t)))
		}
	}
}

// WaitLog waits for a stderr line containing s, for up to redistest.WaitLimit.
func (p *Proc) WaitLog(t testing.TB, s string) {
	t.Helper()
	limit := redistest.WaitLimit(t)
	timeout := time.After(limit)
	for {
		select {
		case l, ok := <-p.logs:
			if !ok {
				t.Fatalf("%s exited without logging %q", p.name(), s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("%s logged no %q within %v", p.name(), s, limit)
		}
	}
}

// Out returns the process's stdout, line by line, closed once it ends: for
// a reader that is not the test's goroutine (Expect fails the test).
func (p *Proc) Out() <-chan string { return p.out }

// Exited is closed once the process has exited; Err then returns Wait's
// error.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err returns the process's exit error; call it after Exited.
func (p *Proc) Err() error { return p.err }

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	p.Cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGTERM and returns the exit error, failing the test if the
// process has not exited within 20 seconds.
func (p *Proc) Stop(t testing.TB) error {
	t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit within 20s of SIGTERM", p.name())
		return nil
	}
}

func (p *Proc) name() string {
	if p.ID != "" {
		return "worker " + p.ID
	}
	return filepath.Base(p.Cmd.Path)
}

// ChildEnv names the role a test binary run as a child plays: see Child.
const ChildEnv = "REDMAP_CHILD"

// Child returns a command that runs the test binary again as a child in
// role: the package's TestMain reads os.Getenv(ChildEnv) and, if set, plays
// the role (a worker with the package's test functions, a manager) instead of
// running tests. args and env are added to the child's.
func Child(role string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = slices.Concat(os.Environ(), env, []string{ChildEnv + "=" + role})
	return cmd
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
	buildTo string
)

// Build builds the main package pkg once per test binary and returns the
// path of its executable, removed when the process exits through Cleanup.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	if buildTo == "" {
		dir, err := os.MkdirTemp("", "redmap-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildTo = dir
	}
	bin := filepath.Join(buildTo, fmt.Sprintf("bin%d-%s", len(built), filepath.Base(pkg)))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

// Cleanup removes what Build built; TestMain calls it after the tests.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildTo != "" {
		os.RemoveAll(buildTo)
	}
}

// Tail returns the last lines the process wrote to stderr.
func (p *Proc) Tail() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	return strings.Join(p.tail, "\n")
}

// ChildArgs returns the arguments Child gave a child, without the test
// binary's own: what a child role parses as its command line.
func ChildArgs() []string {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "-test.run=^$" {
		args = args[1:]
	}
	return args
}
