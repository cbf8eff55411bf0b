package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// ScreenshotEnv names the variable that, set to a path, makes
// TestDashboardInBrowser save its screenshot there (make screenshot).
const screenshotEnv = "REDMAP_SCREENSHOT"

// browser starts a headless Chromium (see harness.Browser).
func browser(t *testing.T, w, h int) context.Context {
	t.Helper()
	return harness.Browser(t, w, h)
}

// startDashboard runs `redmap dashboard` as a process on the Env's Redis,
// with env added to its environment, and returns its address.
func startDashboard(t *testing.T, e *harness.Env, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"),
		append([]string{"dashboard", "-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "REDIS_URL="+e.URL), env...)
	p := harness.Start(t, cmd)
	return strings.TrimSuffix(p.Expect(t, "dashboard "), "/")
}

// startWorkers starts n worker processes of the Env's queue (worker.Main,
// its default lease of 10 s), and returns them with their ids.
func startWorkers(t *testing.T, e *harness.Env, n int) []*harness.Proc {
	t.Helper()
	var ps []*harness.Proc
	for range n {
		p := harness.Start(t, harness.Child("worker", []string{"REDIS_URL=" + e.URL},
			"-queue", e.Queue, "-concurrency", "2"))
		p.ID = p.Expect(t, "worker ")
		ps = append(ps, p)
	}
	return ps
}

// waitFor polls the page until the JavaScript expression cond is true.
func waitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("the page never showed %s: %v", what, err)
	}
}

// A real page, in headless Chromium, of a real fleet: two worker
// processes, a manager running a long batch, and `redmap dashboard
// -actions` as a process. The page shows the queue, both workers and the
// batch; the batch's bar advances between two looks; a worker killed with
// SIGKILL is shown dead; the drain button drains the other, which exits.
// The page fits a 1280×800 window and a phone's width.
func TestDashboardInBrowser(t *testing.T) {
	e := harness.Setup(t)
	ctx := browser(t, 1280, 800)
	ws := startWorkers(t, e, 2)
	m := e.Manager(t, manager.Options{Poll: 250 * time.Millisecond})
	harness.WaitLive(t, m, ws[0].ID, ws[1].ID)
	batch, err := manager.Submit(context.Background(), m, slow, ints(20_000), manager.ChunkSize(2), manager.Label("nightly-import"))
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Cancel() // if the test fails before the purge ends it
	// An operator's limit on a function: the queue's card lists it.
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.SetLimit(context.Background(), e.Queue, "geocode", redmap.Limit{Rate: 50, Burst: 5, Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	base := startDashboard(t, e, []string{"REDMAP_DASHBOARD_TOKEN=" + operatorToken}, "-actions")

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the queue", fmt.Sprintf(`!!document.querySelector('.card[data-queue=%q]')`, e.Queue))
	waitFor(t, ctx, "the limit on its card", fmt.Sprintf(`(() => { const l = document.querySelector('.card[data-queue=%q] .limits li[data-func="geocode"]'); return !!l && l.querySelector('[data-field="limit"]').textContent === "50/1s burst 5, 8 at once" && l.textContent.includes("operator") })()`, e.Queue))
	for _, w := range ws {
		waitFor(t, ctx, "worker "+w.ID, fmt.Sprintf(`!!document.querySelector('tr[data-worker=%q][data-state="running"]')`, w.ID))
	}
	// The running batch's card, not the first .batch of the page: other
	// tests' queues on the shared server show theirs too, and a
	// pipeline's card is a .batch with no data-done.
	const running = `[...document.querySelectorAll('.batch[data-outcome="running"]')].find(b => b.querySelector('.head').textContent.includes("label nightly-import"))`
	waitFor(t, ctx, "the batch under way, with its label", `(() => { const b = `+running+`; return !!b && Number(b.dataset.done) > 0 })()`)
	first, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(`+running+`.dataset.done)`))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the batch's bar advance", fmt.Sprintf(`(() => { const b = %s; return !!b && Number(b.dataset.done) > %d && parseFloat(b.querySelector('.bar .ok').style.width) > 0 })()`, running, first))
	t.Logf("batch progress advanced past %d elements", first)

	// A screenshot of the page in action, for README (make screenshot).
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatal("the screenshot is not a PNG")
	}
	if path := os.Getenv(screenshotEnv); path != "" {
		if err := os.WriteFile(filepath.Clean(path), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", path)
	}

	// The page fits the window: nothing wider than it.
	fits := `document.documentElement.scrollWidth <= window.innerWidth`
	waitFor(t, ctx, "a page as wide as a 1280×800 window", fits)

	// SIGKILL one worker: it shows dead once its lease is out.
	killed := time.Now()
	if err := ws[0].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the killed worker dead", fmt.Sprintf(`!!document.querySelector('tr.dead[data-worker=%q][data-state="dead"]')`, ws[0].ID))
	t.Logf("killed worker shown dead %v after SIGKILL (its lease: %v; the page polls every second)", time.Since(killed).Round(100*time.Millisecond), worker.DefaultLease)

	// Drain the other from its button: it stops taking tasks and exits.
	sel := fmt.Sprintf(`tr[data-worker=%q] button[data-action="drain"]`, ws[1].ID)
	waitFor(t, ctx, "the drain button", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
	click(t, ctx, sel)
	// The first action asks for the operator token; signed in, the page
	// sends the drain again, with it.
	waitFor(t, ctx, "the sign-in form", `!document.getElementById('login').hidden`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { document.getElementById('token').value = %q; document.getElementById('login').requestSubmit(); return true })()`, operatorToken))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ws[1].Exited():
		if err := ws[1].Err(); err != nil {
			t.Fatalf("the drained worker exited with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the drained worker never exited")
	}
	t.Log("drain button, then the operator token: the worker exited 0")

	// A failure group shows a sample stack on click (1 element in 100
	// fails).
	waitFor(t, ctx, "a failure group", `!!document.querySelector('tr.fail')`)
	click(t, ctx, `tr.fail`)
	waitFor(t, ctx, "a stack after a click", `!!document.querySelector('pre.stack')`)
	t.Log("a click on a failure group shows its sample stack")

	// Purge: the first click arms, the second confirms; the queued tasks
	// fail in the batch (its manager goes on submitting the rest, which no
	// worker is left to run).
	failedBefore, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(`+running+`.dataset.failed)`))
	if err != nil {
		t.Fatal(err)
	}
	purge := fmt.Sprintf(`.card[data-queue=%q] button[data-action="purge"]`, e.Queue)
	click(t, ctx, purge)
	waitFor(t, ctx, "the purge button armed", fmt.Sprintf(`document.querySelector(%q).textContent === "confirm purge"`, purge))
	click(t, ctx, purge)
	waitFor(t, ctx, "the purge done", `document.getElementById('status').textContent.includes('task(s) failed in their batches')`)
	waitFor(t, ctx, "the purged tasks failed in the batch", fmt.Sprintf(`(() => { const b = %s; return !!b && Number(b.dataset.failed) > %d + 100 })()`, running, failedBefore))
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
	t.Logf("purge, confirmed: %s", status)

	// A phone's width: still no sideways scrolling of the page itself.
	phone := browser(t, 390, 844)
	// (Headless Chromium keeps a window at least 500 px wide: the phone's
	// 390 px viewport is emulated, as a phone reports it.)
	if err := chromedp.Do(phone, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	// Once the page has rendered (its stylesheet is in: the script that
	// renders runs after it), not while it loads.
	waitFor(t, phone, "the queue on a phone", fmt.Sprintf(`!!document.querySelector('.card[data-queue=%q]')`, e.Queue))
	width, err := chromedp.Run(phone, chromedp.Evaluate[int](`window.innerWidth`))
	if err != nil || width != 390 {
		t.Fatalf("the phone's viewport is %d px wide (%v), want 390", width, err)
	}
	waitFor(t, phone, "a page as wide as a phone", fits)
	if path := os.Getenv(screenshotEnv); path != "" {
		png, err := chromedp.Run(phone, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		path = strings.TrimSuffix(filepath.Clean(path), ".png") + "-phone.png"
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("phone screenshot written to %s", path)
	}
}

// click clicks the element sel selects, in one step in the page: the page
// renders its state anew every second, and a click made of a query and a
// dispatch (chromedp.Click) may find its node gone in between.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (e) e.click(); return !!e })()`, sel)))
	if err != nil || !found {
		t.Fatalf("clicking %s: found %v, %v", sel, found, err)
	}
}

// historyShotEnv names the variable that, set to a path, makes
// TestDashboardHistoryInBrowser save its screenshot there.
const historyShotEnv = "REDMAP_SCREENSHOT_HISTORY"

// The page's ended batches come from the queue's history in Redis, written
// while no dashboard ran: one done, one failed, one cancelled, and one whose
// manager process was SIGKILLed mid-batch ("manager lost"); each shows the
// counts its manager had.
func TestDashboardHistoryInBrowser(t *testing.T) {
	e := harness.Setup(t)
	ctx := browser(t, 1280, 900)
	startWorkers(t, e, 2)
	m := e.Manager(t, manager.Options{})
	bg := context.Background()
	type want struct {
		outcome, id         string
		done, failed, total int
	}
	var wants []want
	ended := func(b *manager.Batch[int], outcome string) {
		p := b.Progress()
		wants = append(wants, want{outcome, "", p.Done - p.Failed, p.Failed, p.Total})
	}
	done, err := manager.Submit(bg, m, slow, ints(40), manager.ChunkSize(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Wait(bg); err != nil {
		t.Fatal(err)
	}
	ended(done, "done")
	failed, err := manager.Submit(bg, m, slow, ints(200), manager.ChunkSize(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failed.Wait(bg); err == nil {
		t.Fatal("want 2 elements failed")
	}
	ended(failed, "failed")
	cancelled, err := manager.Submit(bg, m, slow, ints(4000), manager.ChunkSize(2))
	if err != nil {
		t.Fatal(err)
	}
	for cancelled.Progress().Done < 50 {
		select {
		case <-cancelled.Done():
			t.Fatal("the batch to cancel ended first")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancelled.Cancel()
	cancelled.Wait(bg)
	ended(cancelled, "cancelled")
	for i := range wants {
		wants[i].id = []*manager.Batch[int]{done, failed, cancelled}[i].ID()
	}
	child := harness.Start(t, harness.Child("manager", []string{"REDIS_URL=" + e.URL, "REDMAP_QUEUE=" + e.Queue}))
	lostManager := child.Expect(t, "submitted ")
	redistest.Eventually(t, "the child's batch under way", func() bool {
		return strings.Contains(runState(t, e), `"done":`) // its progress published
	})
	child.Kill()
	<-child.Exited()

	base := startDashboard(t, e, nil, "-queue", e.Queue) // only now: it saw none of these end; its queue alone, as the newest ended batches of the other tests' queues would fill State's EndedShown
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	for _, w := range wants {
		sel := fmt.Sprintf(`.batch[data-batch=%q][data-outcome=%q]`, w.id, w.outcome)
		waitFor(t, ctx, "the "+w.outcome+" batch", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](fmt.Sprintf(`(() => { const b = document.querySelector(%q).dataset; return [Number(b.done), Number(b.failed), Number(b.total)] })()`, sel)))
		if err != nil || len(got) != 3 || got[0] != w.done || got[1] != w.failed || got[2] != w.total {
			t.Fatalf("the page shows the %s batch at done/failed/total %v (%v); its manager counted %d/%d/%d", w.outcome, got, err, w.done, w.failed, w.total)
		}
		t.Logf("%-9s page %d/%d/%d, manager %d/%d/%d", w.outcome, got[0], got[1], got[2], w.done, w.failed, w.total)
	}
	lost := `.batch[data-outcome="manager lost"]`
	waitFor(t, ctx, "the batch of the killed manager, lost", fmt.Sprintf(`!!document.querySelector('%s[data-batch^="%s"]') && Number(document.querySelector('%s').dataset.total) === 5000`, lost, lostManager, lost))
	lostDone, _ := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`Number(document.querySelector('%s').dataset.done)`, lost)))
	t.Logf("manager lost: page %d/5000 done (its last published progress)", lostDone)
	if path := os.Getenv(historyShotEnv); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Clean(path), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", path)
	}
}

// layoutShotEnv names the variable that, set to a path, makes
// TestDashboardLayoutInBrowser save its screenshot there.
const layoutShotEnv = "REDMAP_SCREENSHOT_LAYOUT"

// A busy queue at 1280×900: 20 ended batches (kept on the page for
// Options.Keep), one running, two workers and failure groups. The newest
// ended batches show as cards and the others fold into one line, so that
// Workers and Failures stay in view; the workers table fits without
// scrolling sideways, and so does the page.
func TestDashboardLayoutInBrowser(t *testing.T) {
	e := harness.Setup(t)
	ctx := browser(t, 1280, 900)
	ws := startWorkers(t, e, 2)
	m := e.Manager(t, manager.Options{Poll: 250 * time.Millisecond})
	harness.WaitLive(t, m, ws[0].ID, ws[1].ID)
	bg := context.Background()
	for i := range 20 {
		n := 40
		if i == 7 {
			n = 200 // two of its elements fail: a failure group
		}
		if _, err := manager.Map(bg, m, slow, ints(n), manager.ChunkSize(4)); (err != nil) != (i == 7) {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	// An ended pipeline: its card comes after the running batch's.
	if _, err := manager.Collect(bg, m, manager.Then(manager.From(ints(8)), slow), manager.ChunkSize(4)); err != nil {
		t.Fatal(err)
	}
	running, err := manager.Submit(bg, m, slow, ints(50_000), manager.ChunkSize(2))
	if err != nil {
		t.Fatal(err)
	}
	defer running.Cancel()
	base := startDashboard(t, e, nil, "-queue", e.Queue) // the other tests' queues share the server
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	const shown = `[document.querySelectorAll('.batch.finished:not(.pipeline)').length, document.querySelectorAll('details.older .batch').length,
		document.querySelectorAll('.batch[data-outcome="running"]').length, document.querySelectorAll('#workers tr[data-worker]').length,
		document.querySelectorAll('#failures tr.fail').length]`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const [ended, folded, running, workers, fails] = `+shown+`;
		return ended === 20 && folded === 17 && running === 1 && workers === 2 && fails > 0 })()`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[[]int](shown))
		t.Fatalf("the page shows [ended, folded, running, workers, failure groups] %v, want [20 17 1 2 >0]: %v", got, err)
	}
	// Running work first: the running batch's card above the ended
	// pipeline's, and within the window.
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const run = document.querySelector('.batch[data-outcome="running"]').getBoundingClientRect();
		const pipe = document.querySelector('.batch.pipeline.finished');
		return [run.top, run.bottom, pipe ? pipe.getBoundingClientRect().top : -1, innerHeight];
	})()`))
	if err != nil || len(order) != 4 {
		t.Fatalf("measuring the cards: %v %v", order, err)
	}
	if order[2] < 0 || order[0] > order[2] || order[1] > order[3] {
		t.Errorf("the running batch's card spans %.0f to %.0f px, the ended pipeline's starts at %.0f px (-1: none), the window is %.0f px: want the running batch first and in view",
			order[0], order[1], order[2], order[3])
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const top = (id) => document.getElementById(id).closest('section').querySelector('h2').getBoundingClientRect().top;
		const row = (sel) => document.querySelector(sel).getBoundingClientRect().bottom;
		const scroll = document.getElementById('workers').closest('.scroll');
		return [innerHeight, top('workers'), row('#workers tr[data-worker]:last-of-type'), top('failures'), row('#failures tr.fail'),
			scroll.scrollWidth - scroll.clientWidth, document.documentElement.scrollWidth - innerWidth];
	})()`))
	if err != nil || len(got) != 7 {
		t.Fatalf("measuring the page: %v %v", got, err)
	}
	h, workersTop, workersBottom, failuresTop, failuresBottom, tableOver, pageOver := got[0], got[1], got[2], got[3], got[4], got[5], got[6]
	t.Logf("at 1280×900: Workers from %.0f to %.0f px, Failures from %.0f to %.0f px; the workers table %.0f px wider than its box, the page %.0f px wider than the window",
		workersTop, workersBottom, failuresTop, failuresBottom, tableOver, pageOver)
	if workersBottom > h || failuresBottom > h {
		t.Errorf("Workers (to %.0f px) or Failures (to %.0f px) below the %.0f px window", workersBottom, failuresBottom, h)
	}
	if tableOver > 0 || pageOver > 0 {
		t.Errorf("the workers table (%.0f px) or the page (%.0f px) scrolls sideways at 1280 px", tableOver, pageOver)
	}
	if path := os.Getenv(layoutShotEnv); path != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Clean(path), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", path)
	}
}

// runState returns the batches the CLI lists as running on the Env's queue,
// as JSON.
func runState(t *testing.T, e *harness.Env) string {
	t.Helper()
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), "batches", "-queue", e.Queue, "-json")
	cmd.Env = append(os.Environ(), "REDIS_URL="+e.URL)
	out, _ := cmd.Output()
	return string(out)
}
