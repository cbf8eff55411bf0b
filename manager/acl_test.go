package manager_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// The least-privilege ACL rule is README's own line, so that what README
// tells operators is what the tests run.

// readmeRule returns the arguments of README's "ACL SETUSER redmap ..." line
// after the user name, with the password set to pass.
func readmeRule(t *testing.T, pass string) []string {
	t.Helper()
	readme, err := os.ReadFile("../docs/connecting.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(readme)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ACL SETUSER redmap "); ok {
			return strings.Fields(strings.ReplaceAll(rest, ">PASSWORD", ">"+pass))
		}
	}
	t.Fatal("README has no line beginning with ACL SETUSER redmap")
	return nil
}

// clusterAdditions returns what docs/connecting.md says to add to the rule
// on a Cluster: its backquoted "+cluster|slots ..." permissions.
func clusterAdditions(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/connecting.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "`+cluster|slots")
	add, _, ok2 := strings.Cut(rest, "`")
	if !ok || !ok2 {
		t.Fatal("docs/connecting.md names no `+cluster|slots ...` additions")
	}
	return strings.Fields("+cluster|slots" + add)
}

// setUser creates (or resets) an ACL user with rule.
func setUser(t *testing.T, admin *redis.Client, user string, rule []string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset"}
	for _, r := range rule {
		args = append(args, r)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}

func userClient(t *testing.T, srv *redistest.Server, user, pass string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: pass})
	t.Cleanup(func() { c.Close() })
	return c
}

// Managers and worker processes running as README's least-privilege user do
// everything: Map, MapWith, a worker killed mid-batch (its tasks reaped), and
// Redis flushed mid-batch (the manager puts back what was lost).
func TestACLLeastPrivilege(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	setUser(t, admin, "redmap", readmeRule(t, "pw"))
	b := faultBundle(t, srv, srv.Addr())
	b.Client = userClient(t, srv, "redmap", "pw")
	a, _, m := twoWorkers(t, b, "REDMAP_URL=redis://redmap:pw@"+srv.Addr()+"/0")
	ctx := testCtx(t)

	if ys, err := manager.Map(ctx, m, square, ints(2000)); err != nil || ys[1999] != 1999*1999 {
		t.Fatalf("Map as the ACL user: %v", err)
	}
	tab := table(1 << 16)
	ys, err := manager.MapWith(ctx, m, lookup, tab, ints(1000))
	if err != nil || ys[999] != tab[999] {
		t.Fatalf("MapWith as the ACL user: %v", err)
	}
	// Payloads and results over broker.Inline go in and out beside the
	// scripts, in a MULTI with them; with the script cache flushed, that
	// MULTI meets NOSCRIPT and is sent again with the whole script, not
	// after a SCRIPT LOAD, which the rule does not grant.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	big, err := manager.Map(ctx, m, bigEcho, bigInput(20), manager.ChunkSize(1))
	if err != nil {
		t.Fatalf("Map of payloads over broker.Inline as the ACL user, the script cache flushed: %v", err)
	}
	for i, y := range big {
		if y != bigWant(i) {
			t.Fatalf("bigecho of element %d: %d bytes, want %d", i, len(y), len(bigWant(i)))
		}
	}
	batch, err := manager.Submit(ctx, m, slowSquare, ints(3000), manager.ChunkSize(5))
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, batch, sq, func(seen int) {
		switch seen {
		case 500:
			a.Cmd.Process.Signal(syscall.SIGKILL)
		case 1500:
			if err := admin.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Removing any one command from README's rule gives an error naming that
// command, typed ErrPermission: from a manager's first Submit and from a
// worker's Run, before either does anything.
func TestACLEachCommandNamed(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rule := readmeRule(t, "pw")
	t.Parallel()
	for i, r := range rule {
		cmd, ok := strings.CutPrefix(r, "+")
		if !ok {
			continue
		}
		t.Run(cmd, func(t *testing.T) {
			user := "no-" + cmd
			setUser(t, admin, user, append(rule[:i:i], rule[i+1:]...))
			c := userClient(t, srv, user, "pw")
			check := func(who string, err error) {
				t.Helper()
				var ce *redmap.CommandError
				if !errors.As(err, &ce) || !errors.Is(err, redmap.ErrPermission) || !strings.Contains(ce.Command, strings.ToUpper(cmd)) {
					t.Fatalf("%s without %s: %v, want ErrPermission naming %s", who, cmd, err, strings.ToUpper(cmd))
				}
			}
			m, err := manager.New(c, manager.Options{Queue: "acl"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_, err = manager.Map(testCtx(t), m, square, ints(3))
			check("Map", err)

			w, err := worker.New(c, worker.Options{Queue: "acl"})
			if err != nil {
				t.Fatal(err)
			}
			w.Register(square)
			check("worker.Run", w.Run(testCtx(t)))
		})
	}
}

// A permission taken away in the middle of a batch is not an outage: the
// batch ends at once, every element not yet delivered failing with
// ErrPermission naming the command, and each worker process shows the
// refusal in its info for operators (redmap workers) if it runs the command
// too (TIME; BLMOVE is the manager's alone).
func TestACLRevokedMidBatch(t *testing.T) {
	for _, cmd := range []string{"time", "blmove"} {
		t.Run(cmd, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			rule := readmeRule(t, "pw")
			setUser(t, admin, "redmap", rule)
			b := faultBundle(t, srv, srv.Addr())
			b.Client = userClient(t, srv, "redmap", "pw")
			a, _, m := twoWorkers(t, b, "REDMAP_URL=redis://redmap:pw@"+srv.Addr()+"/0")

			// 3,600 elements of 20 ms after the revocation keep eight
			// slots busy for 9 s: the manager's next reap (once per Poll,
			// 1 s), which runs TIME, comes while the batch runs. (With
			// 1 ms elements the batch could end before it, nothing
			// failing, as CI saw.)
			batch, err := manager.Submit(testCtx(t), m, calmSquare, ints(4000), manager.ChunkSize(1))
			if err != nil {
				t.Fatal(err)
			}
			var revoked time.Time
			failed := everyElementEnds(t, batch, redmap.ErrPermission, func(seen int) {
				if seen == 400 {
					if err := admin.Do(context.Background(), "ACL", "SETUSER", "redmap", "-"+cmd).Err(); err != nil {
						t.Fatal(err)
					}
					revoked = time.Now()
				}
			})
			_, err = batch.Wait(testCtx(t))
			t.Logf("-%s after 400 results: %d elements failed, the batch ended %v later: %v", cmd, failed,
				time.Since(revoked).Round(time.Millisecond), err)
			if failed == 0 || !strings.Contains(err.Error(), strings.ToUpper(cmd)) {
				t.Fatalf("got %v, want elements failing with ErrPermission naming %s", err, strings.ToUpper(cmd))
			}
			if cmd == "blmove" {
				return // the manager's wait for results; workers do not run it
			}
			info := keys.WorkerInfo("redmap", b.Queue, a.ID)
			eventually(t, "the worker shows the refusal", func() bool {
				e, _ := admin.HGet(context.Background(), info, "error").Result()
				return strings.Contains(e, strings.ToUpper(cmd))
			})
		})
	}
}

// The documented rule works on a Cluster and through Sentinel too (issue
// 35: on a Cluster go-redis was refused CLUSTER SLOTS, then logged NOPERM
// for COMMAND again and again): a manager and two worker processes, as the
// user on every node, run a Map and a MapWith.
func TestACLTopologies(t *testing.T) {
	redistest.OwnTopology(t)
	t.Parallel()
	rule := readmeRule(t, "pw")
	run := func(t *testing.T, client redis.UniversalClient, url string) {
		b := &harness.Env{Client: client, URL: url, Queue: "acl-" + strings.ToLower(t.Name()[len("TestACLTopologies/"):])}
		a, c, m := twoWorkers(t, b, "REDMAP_GOREDIS_LOGS=1")
		ctx := testCtx(t)
		if ys, err := manager.Map(ctx, m, square, ints(2000)); err != nil || ys[1999] != 1999*1999 {
			t.Fatalf("Map as the ACL user: %v", err)
		}
		tab := table(1 << 16)
		if ys, err := manager.MapWith(ctx, m, lookup, tab, ints(1000)); err != nil || ys[999] != tab[999] {
			t.Fatalf("MapWith as the ACL user: %v", err)
		}
		// go-redis logs what it was refused (kept on the workers' stderr).
		for _, p := range []*harness.Proc{a, c} {
			if tail := p.Tail(); strings.Contains(tail, "NOPERM") {
				t.Fatalf("a worker logged a refusal:\n%s", tail)
			}
		}
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		for _, n := range cl.Nodes {
			setUser(t, n.Client(t), "redmap", append(rule, clusterAdditions(t)...))
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "redmap", Password: "pw"})
		t.Cleanup(func() { c.Close() })
		url := strings.Replace(cl.URL(), "redis://", "redis://redmap:pw@", 1)
		run(t, c, url)
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		st := redistest.StartSentinel(t)
		setUser(t, st.Primary(t).Client(t), "redmap", rule)
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName, SentinelAddrs: st.Addrs(), Username: "redmap", Password: "pw"})
		t.Cleanup(func() { c.Close() })
		url := "redis-sentinel://redmap:pw@" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName
		run(t, c, url)
	})
}
