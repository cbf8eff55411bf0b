package harness

import (
	"context"
	"os/exec"
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
// (.ci/run installs Debian's).
func Browser(t *testing.T, w, h int) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no chromium in PATH (Debian: apt-get install chromium); skipping the browser test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.WindowSize(w, h), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	return ctx
}
