package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of a Sentinel set-up monitor.
const MasterName = "redmap"

// Sentinel is a Redis primary, one replica and three sentinels on loopback
// ports, as a test's own; see StartSentinel.
type Sentinel struct {
	Servers   []*Server // the primary and the replica, in start order
	Sentinels []*Server // the three sentinel processes
}

// StartSentinel starts a primary, a replica of it and three sentinels that
// monitor it with a quorum of 2, a down-after of 1 s and a failover timeout of
// 5 s; all are stopped when tb ends. It returns once the replica is in sync
// and every sentinel knows the replica and the other sentinels.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	Slow(tb)
	primary := Start(tb)
	replica := Start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	st := &Sentinel{Servers: []*Server{primary, replica}}
	for range 3 {
		st.Sentinels = append(st.Sentinels, startSentinel(tb, primary.Port))
	}
	ctx := context.Background()
	rc := replica.Client(tb)
	Eventually(tb, "replica in sync and known to every sentinel", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return false
		}
		for _, s := range st.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
			reps, err1 := c.Replicas(ctx, MasterName).Result()
			sents, err2 := c.Sentinels(ctx, MasterName).Result()
			c.Close()
			if err1 != nil || err2 != nil || len(reps) != 1 || len(sents) != 2 {
				return false
			}
		}
		return true
	})
	return st
}

// startSentinel starts one sentinel process monitoring the primary on port.
func startSentinel(tb testing.TB, primary int) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(missing)
	}
	dir := tb.TempDir()
	for range 5 {
		port, err := freePort(false)
		if err != nil {
			tb.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		err = os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, filepath.Join(dir, "sentinel.log"), MasterName, primary, MasterName, MasterName, MasterName)), 0o600)
		if err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		s := &Server{Port: port, dir: dir, cmd: cmd, exited: exited}
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		ok := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if c.Ping(context.Background()).Err() == nil {
				ok = true
				break
			}
			select {
			case <-exited:
			case <-time.After(10 * time.Millisecond):
				continue
			}
			break
		}
		c.Close()
		if ok {
			tb.Cleanup(s.stop)
			return s
		}
		s.stop()
	}
	log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
	tb.Fatalf("redistest: redis sentinel did not start; its log:\n%s", log)
	return nil
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	out := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a failover client of the set-up, closed when tb ends.
func (st *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: st.Addrs()})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Primary returns the server the sentinels now name as the primary.
func (st *Sentinel) Primary(tb testing.TB) *Server {
	tb.Helper()
	for _, sn := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		addr, err := c.GetMasterAddrByName(context.Background(), MasterName).Result()
		c.Close()
		if err != nil || len(addr) != 2 {
			continue
		}
		for _, s := range st.Servers {
			if strconv.Itoa(s.Port) == addr[1] {
				return s
			}
		}
	}
	tb.Fatal("redistest: no sentinel names a primary")
	return nil
}

// Failover asks a sentinel for a planned failover (SENTINEL FAILOVER) and
// waits until the sentinels name the other server as primary and it takes
// writes.
func (st *Sentinel) Failover(tb testing.TB) {
	tb.Helper()
	old := st.Primary(tb)
	c := redis.NewSentinelClient(&redis.Options{Addr: st.Sentinels[0].Addr()})
	defer c.Close()
	if err := c.Failover(context.Background(), MasterName).Err(); err != nil {
		tb.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	st.waitNewPrimary(tb, old)
}

// KillPrimary kills the primary with SIGKILL and waits until the sentinels
// have promoted the replica and it takes writes. The old primary stays dead.
func (st *Sentinel) KillPrimary(tb testing.TB) {
	tb.Helper()
	old := st.Primary(tb)
	old.Kill(tb)
	st.waitNewPrimary(tb, old)
}

func (st *Sentinel) waitNewPrimary(tb testing.TB, old *Server) {
	tb.Helper()
	Eventually(tb, "a new primary taking writes", func() bool {
		p := st.Primary(tb)
		if p == old {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		defer c.Close()
		return c.Set(context.Background(), "redistest:probe", "1", time.Second).Err() == nil
	})
}

// KillPrimaryLosingWrites is KillPrimary where the primary dies holding
// writes its replica never got, as when a primary is killed while its
// replica lags: it cuts the replication link (and lets the default user no
// longer resync, so the replica cannot reconnect), waits until the primary
// has taken writes since and until(primary) holds (a test's own sign that
// the writes it cares about happened), then kills it and waits for the
// promotion. A client must be writing meanwhile. It reports whether until
// held (within writeAheadWindow of the cut, after which the kill comes
// anyway) and the promoted replica did lack every write since the cut (its
// replication offset at promotion not past the cut's): if the link was not
// cut in time, it may not.
func (st *Sentinel) KillPrimaryLosingWrites(tb testing.TB, until func(primary *redis.Client) bool) (lost bool) {
	tb.Helper()
	ctx := context.Background()
	old := st.Primary(tb)
	pc := redis.NewClient(&redis.Options{Addr: old.Addr()})
	defer pc.Close()
	cut, held := writeAhead(tb, pc, until, writeAheadWindow)
	old.Kill(tb)
	st.waitNewPrimary(tb, old)
	nc := redis.NewClient(&redis.Options{Addr: st.Primary(tb).Addr()})
	defer nc.Close()
	// second_repl_offset is one past the offset the replica had when it
	// was promoted.
	return held && replOffset(ctx, nc, "second_repl_offset")-1 <= cut
}

// RestartPrimaryEmpty kills the primary and starts it again at once, empty
// and as a primary: its replica resyncs from it and empties too, unless the
// sentinels promoted the replica first (then the restarted server becomes
// its replica). Either way Redis lost its data.
func (st *Sentinel) RestartPrimaryEmpty(tb testing.TB) {
	tb.Helper()
	p := st.Primary(tb)
	var args []string
	for i := 0; i < len(p.args); i++ {
		if p.args[i] == "--replicaof" {
			i += 2
			continue
		}
		args = append(args, p.args[i])
	}
	p.args = args
	p.Restart(tb)
}

// DropClients closes every client connection of the primary (CLIENT KILL
// TYPE normal), as a network fault would.
func (st *Sentinel) DropClients(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: st.Primary(tb).Addr()})
	defer c.Close()
	c.ClientKillByFilter(context.Background(), "TYPE", "normal") // the primary may be restarting
}

// StartFailover asks a sentinel for a planned failover without waiting for
// it; it reports whether the sentinel accepted (not if one is in progress).
func (st *Sentinel) StartFailover() bool {
	c := redis.NewSentinelClient(&redis.Options{Addr: st.Sentinels[0].Addr()})
	defer c.Close()
	return c.Failover(context.Background(), MasterName).Err() == nil
}
