package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium returns the path of a Chromium or Chrome, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser starts a headless Chromium with a window of w×h and returns its
// context, ended with the test; it skips the test if there is no Chromium
// (.ci/run installs Debian's). A test runs its browsers while it holds the
// machine's browser turn (see browserTurn); a parallel test calls Browser
// after t.Parallel, so that it never holds the turn while paused.
func Browser(t *testing.T, w, h int) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no chromium in PATH (Debian: apt-get install chromium); skipping the browser test")
	}
	browserTurn(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.WindowSize(w, h), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	return ctx
}

// A headless Chromium takes a core and hundreds of MB to start and render:
// several at once, from this process's tests and another make test's, on a
// 2-core machine, made pages miss their 60 s waits. So the browser tests of
// every test process on the machine take turns: a test holds the turn
// (within the process, browserMu; across processes, a lock on a file in the
// temporary directory) from its first Browser to its end.
var (
	browserMu      sync.Mutex
	browserHolders sync.Map // *testing.T -> struct{}: the test holding the turn
)

// browserTurn waits for the machine's browser turn and holds it until t
// ends; a test that holds it already goes on.
func browserTurn(t *testing.T) {
	t.Helper()
	if _, held := browserHolders.Load(t); held {
		return
	}
	browserMu.Lock()
	unlock, err := lockFile(filepath.Join(os.TempDir(), "redmap-browser.lock"))
	if err != nil {
		browserMu.Unlock()
		t.Fatalf("harness: the browser turn: %v", err)
	}
	browserHolders.Store(t, struct{}{})
	t.Cleanup(func() {
		browserHolders.Delete(t)
		unlock()
		browserMu.Unlock()
	})
}
