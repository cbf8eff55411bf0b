package manager_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap/examples/squares/tasks"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

var (
	buildOnce  sync.Once
	squaresBin string
	buildErr   error
)

// squares builds examples/squares once per test binary.
func squares(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		squaresBin = filepath.Join(artefacts, "squares")
		out, err := exec.Command("go", "build", "-o", squaresBin, "github.com/redmap/redmap/examples/squares").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build examples/squares: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return squaresBin
}

// proc is a squares worker process.
type proc struct {
	cmd  *exec.Cmd
	id   string
	logs *bytes.Buffer
	done chan error
}

func startWorkerProc(t *testing.T, url, queue string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(squares(t), append([]string{"worker", "-queue", queue}, args...)...)
	redistest.DieWithParent(cmd)
	cmd.Env = append(cmd.Environ(), "REDIS_URL="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = &syncWriter{w: p.logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The worker prints "worker <id>" first.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("worker printed no id: %v", err)
	}
	p.id = strings.TrimPrefix(strings.TrimSpace(line), "worker ")
	go func() {
		io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends SIGTERM and returns the process's exit error.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("worker %s did not exit within 20s of SIGTERM", p.id)
		return nil
	}
}

// Workers in their own OS processes serve an in-test manager and a manager
// process; on SIGTERM they drain and exit 0.
func TestWorkerProcesses(t *testing.T) {
	b := setup(t)
	url := b.srv.URL()
	w1 := startWorkerProc(t, url, b.queue, "-concurrency", "2")
	w2 := startWorkerProc(t, url, b.queue, "-concurrency", "2")
	m := b.manager(t, manager.Options{})
	waitLive(t, m, w1.id, w2.id)

	ys, err := manager.Map(testCtx(t), m, tasks.Square, ints(20_000))
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range ys {
		if y != i*i {
			t.Fatalf("ys[%d] = %d, want %d", i, y, i*i)
		}
	}

	// Each worker takes a private batch and runs all of it.
	for _, w := range []*proc{w1, w2} {
		ys, err := manager.Map(testCtx(t), m, tasks.Square, ints(100), manager.OnWorker(w.id))
		if err != nil || ys[99] != 99*99 {
			t.Fatalf("private batch on %s: %v", w.id, err)
		}
	}

	// A manager process on the same queue.
	cmd := exec.Command(squares(t), "manager", "-queue", b.queue, "-n", "3001")
	cmd.Env = append(cmd.Environ(), "REDIS_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("manager process: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if got, want := lines[len(lines)-1], "sum 9004500500 elements 3001"; got != want {
		t.Fatalf("manager process printed %q, want %q", got, want)
	}

	for _, w := range []*proc{w1, w2} {
		if err := w.stop(t); err != nil {
			t.Fatalf("worker %s exited with %v; logs:\n%s", w.id, err, w.logs)
		}
	}
	live, err := m.Workers(testCtx(t))
	if err != nil || len(live) != 0 {
		t.Fatalf("live workers after both stopped: %v, %v", live, err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
