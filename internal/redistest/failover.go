package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster with replicas (StartClusterReplicas) fails over: these find its
// nodes' roles as the Cluster says them now, and cause and await failovers.

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	master   bool
	masterID string // a replica's master
	failing  bool   // flagged fail or fail?
	slots    [][2]int
}

// nodesOf parses CLUSTER NODES as s says it.
func nodesOf(ctx context.Context, s *Server) ([]clusterNode, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var ns []clusterNode
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		n := clusterNode{id: f[0], addr: addr, master: slices.Contains(flags, "master"), masterID: f[3],
			failing: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot migrating or importing
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, _ := strconv.Atoi(lo)
			b, _ := strconv.Atoi(hi)
			n.slots = append(n.slots, [2]int{a, b})
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// alive reports whether s's process runs (it was not killed, or was
// restarted).
func (s *Server) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// all returns every node, masters and replicas, as started.
func (cl *Cluster) all() []*Server { return append(slices.Clone(cl.Nodes), cl.Replicas...) }

// live returns the nodes whose processes run.
func (cl *Cluster) live() []*Server {
	var out []*Server
	for _, s := range cl.all() {
		if s.alive() {
			out = append(out, s)
		}
	}
	return out
}

// byAddr returns the node at addr, or nil.
func (cl *Cluster) byAddr(addr string) *Server {
	for _, s := range cl.all() {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// view returns the Cluster's nodes as the first live node that answers
// says them.
func (cl *Cluster) view(tb testing.TB) []clusterNode {
	tb.Helper()
	var last error
	for range 100 {
		for _, s := range cl.live() {
			ns, err := nodesOf(context.Background(), s)
			if err == nil {
				return ns
			}
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("redistest: no live cluster node answers CLUSTER NODES: %v", last)
	return nil
}

// slotOf returns key's hash slot.
func (cl *Cluster) slotOf(tb testing.TB, key string) int {
	tb.Helper()
	for _, s := range cl.live() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		slot, err := c.ClusterKeySlot(context.Background(), key).Result()
		c.Close()
		if err == nil {
			return int(slot)
		}
	}
	tb.Fatal("redistest: no live cluster node answers CLUSTER KEYSLOT")
	return 0
}

// owner returns, in ns, the master serving slot, or nil.
func owner(ns []clusterNode, slot int) *clusterNode {
	for i, n := range ns {
		if !n.master {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return &ns[i]
			}
		}
	}
	return nil
}

// Masters returns the nodes that serve slots now.
func (cl *Cluster) Masters(tb testing.TB) []*Server {
	tb.Helper()
	var out []*Server
	for _, n := range cl.view(tb) {
		if n.master && len(n.slots) > 0 && !n.failing {
			if s := cl.byAddr(n.addr); s != nil {
				out = append(out, s)
			}
		}
	}
	return out
}

// MasterOf returns the node that serves key's slot now, as the Cluster
// says.
func (cl *Cluster) MasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	n := owner(cl.view(tb), cl.slotOf(tb, key))
	if n == nil {
		tb.Fatalf("redistest: no master serves the slot of %q", key)
	}
	return cl.byAddr(n.addr)
}

// ReplicaOf returns a live replica of master, or nil.
func (cl *Cluster) ReplicaOf(tb testing.TB, master *Server) *Server {
	tb.Helper()
	ns := cl.view(tb)
	var mid string
	for _, n := range ns {
		if n.addr == master.Addr() {
			mid = n.id
		}
	}
	for _, n := range ns {
		if !n.master && n.masterID == mid && !n.failing {
			if s := cl.byAddr(n.addr); s != nil && s.alive() {
				return s
			}
		}
	}
	return nil
}

// Healthy reports whether every node runs, every node says the cluster is
// ok and agrees on which master serves each slot, and every master has a
// replica that has finished syncing: a Cluster that can take one more
// master's death.
func (cl *Cluster) Healthy() bool { return cl.healthy(context.Background()) }

func (cl *Cluster) healthy(ctx context.Context) bool {
	var owners string
	for _, s := range cl.all() {
		if !s.alive() {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		repl, err2 := c.Info(ctx, "replication").Result()
		c.Close()
		if err != nil || err2 != nil || !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(cl.all()))) {
			return false
		}
		if strings.Contains(repl, "role:slave") && (!strings.Contains(repl, "master_link_status:up") || !strings.Contains(repl, "master_sync_in_progress:0")) {
			return false
		}
		ns, err := nodesOf(ctx, s)
		if err != nil {
			return false
		}
		var own []string
		replicas := map[string]int{}
		for _, n := range ns {
			if n.failing {
				return false
			}
			if !n.master {
				replicas[n.masterID]++
			}
		}
		for _, n := range ns {
			if n.master && len(n.slots) > 0 {
				if replicas[n.id] == 0 {
					return false
				}
				own = append(own, fmt.Sprintf("%s%v", n.addr, n.slots))
			}
		}
		slices.Sort(own)
		if o := strings.Join(own, ";"); owners != "" && o != owners {
			return false
		} else {
			owners = o
		}
	}
	return true
}

// WaitHealthy waits until Healthy holds, failing tb after a minute.
func (cl *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cl.Healthy() {
		if time.Now().After(deadline) {
			tb.Fatal("redistest: the cluster was not healthy within a minute (every node ok and agreeing, every master with a synced replica)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitOwner waits until every live node says to serves slot and the
// cluster is ok, and returns how long that took since from.
func (cl *Cluster) awaitOwner(tb testing.TB, slot int, to *Server, from time.Time, what string) time.Duration {
	tb.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		agreed := true
		for _, s := range cl.live() {
			ns, err := nodesOf(ctx, s)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			info, err2 := c.ClusterInfo(ctx).Result()
			c.Close()
			if o := owner(ns, slot); err != nil || err2 != nil || o == nil || o.addr != to.Addr() || !strings.Contains(info, "cluster_state:ok") {
				agreed = false
				break
			}
		}
		if agreed {
			return time.Since(from)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: %s did not serve slot %d on every node within a minute", what, to.Addr(), slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// KillMaster kills (SIGKILL) the master serving key's slot and waits until
// every live node says its replica serves it: the Cluster's own failover. It
// returns the killed node (see Rejoin), the promoted one, and the time from
// the kill to the promotion as every node sees it.
func (cl *Cluster) KillMaster(tb testing.TB, key string) (killed, promoted *Server, took time.Duration) {
	tb.Helper()
	killed = cl.MasterOf(tb, key)
	promoted, took = cl.KillMasterNode(tb, killed)
	return killed, promoted, took
}

// KillMasterNode is KillMaster of the master m.
func (cl *Cluster) KillMasterNode(tb testing.TB, m *Server) (promoted *Server, took time.Duration) {
	tb.Helper()
	promoted, slot := cl.promotable(tb, m)
	start := time.Now()
	m.Kill(tb)
	return promoted, cl.awaitOwner(tb, slot, promoted, start, "kill -9 of "+m.Addr())
}

// promotable returns the replica of master m that a failover promotes, and
// a slot m serves, whose new owner shows the promotion.
func (cl *Cluster) promotable(tb testing.TB, m *Server) (*Server, int) {
	tb.Helper()
	r := cl.ReplicaOf(tb, m)
	if r == nil {
		tb.Fatalf("redistest: master %s has no live replica to promote", m.Addr())
	}
	return r, cl.firstSlot(tb, m)
}

// firstSlot returns the first slot master m serves.
func (cl *Cluster) firstSlot(tb testing.TB, m *Server) int {
	tb.Helper()
	for _, n := range cl.view(tb) {
		if n.addr == m.Addr() && n.master && len(n.slots) > 0 {
			return n.slots[0][0]
		}
	}
	tb.Fatalf("redistest: %s serves no slot", m.Addr())
	return 0
}

// Failover asks the replica of the master serving key's slot for a planned
// failover (CLUSTER FAILOVER: the master stops taking writes, the replica
// catches up and takes over) and waits until every live node says it serves
// the slot. It returns the old master, now a replica, the new one, and the
// time from the request to the promotion as every node sees it.
func (cl *Cluster) Failover(tb testing.TB, key string) (old, promoted *Server, took time.Duration) {
	tb.Helper()
	old = cl.MasterOf(tb, key)
	promoted, took = cl.FailoverNode(tb, old)
	return old, promoted, took
}

// FailoverNode is Failover of the master m.
func (cl *Cluster) FailoverNode(tb testing.TB, m *Server) (promoted *Server, took time.Duration) {
	tb.Helper()
	promoted, slot := cl.promotable(tb, m)
	start := time.Now()
	c := redis.NewClient(&redis.Options{Addr: promoted.Addr()})
	defer c.Close()
	if err := c.Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", promoted.Addr(), err)
	}
	return promoted, cl.awaitOwner(tb, slot, promoted, start, "CLUSTER FAILOVER on "+promoted.Addr())
}

// ReplicasNow returns the live nodes that replicate a master now.
func (cl *Cluster) ReplicasNow(tb testing.TB) []*Server {
	tb.Helper()
	var out []*Server
	for _, n := range cl.view(tb) {
		if !n.master && !n.failing {
			if s := cl.byAddr(n.addr); s != nil && s.alive() {
				out = append(out, s)
			}
		}
	}
	return out
}

// Rejoin restarts a killed node, empty, on its port with its cluster
// config (it rejoins as a replica of whoever serves its old slots) and
// waits until the Cluster is healthy.
func (cl *Cluster) Rejoin(tb testing.TB, s *Server) {
	tb.Helper()
	s.Restart(tb)
	cl.WaitHealthy(tb)
}

// Killed reports whether s was killed and not restarted.
func (s *Server) Killed() bool { return !s.alive() }

// KillMasterLosingWrites kills the master serving key's slot while its
// replica lags, as KillPrimaryLosingWrites does behind Sentinel: it cuts the
// replication link (and forbids the resync), waits until the master has
// taken writes since and until(master) holds, kills it and waits for the promotion. It reports whether until held and
// the promoted replica lacked every write since the cut.
func (cl *Cluster) KillMasterLosingWrites(tb testing.TB, key string, until func(master *redis.Client) bool) (killed *Server, lost bool) {
	tb.Helper()
	ctx := context.Background()
	killed = cl.MasterOf(tb, key)
	promoted, slot := cl.promotable(tb, killed)
	pc := redis.NewClient(&redis.Options{Addr: killed.Addr()})
	defer pc.Close()
	cut, held := writeAhead(tb, pc, until, 0)
	start := time.Now()
	killed.Kill(tb)
	cl.awaitOwner(tb, slot, promoted, start, "kill -9 of "+killed.Addr())
	nc := redis.NewClient(&redis.Options{Addr: promoted.Addr()})
	defer nc.Close()
	// second_repl_offset is one past the offset the replica had when it
	// was promoted.
	return killed, held && replOffset(ctx, nc, "second_repl_offset")-1 <= cut
}

// writeAhead cuts the replication link of the primary pc reaches (and
// forbids the resync), then waits until it has taken writes since and
// until(pc) holds, or, once window (if not 0) has passed with writes taken,
// no longer; it returns its replication offset at the cut, and whether
// until held.
func writeAhead(tb testing.TB, pc *redis.Client, until func(*redis.Client) bool, window time.Duration) (cut int64, held bool) {
	tb.Helper()
	ctx := context.Background()
	if err := pc.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync", "-replconf").Err(); err != nil {
		tb.Fatal(err)
	}
	if err := pc.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		tb.Fatal(err)
	}
	cut = replOffset(ctx, pc, "master_repl_offset")
	since := time.Now()
	Eventually(tb, "writes the replica did not get", func() bool {
		held = until(pc) // called from the first poll on: it may start the writes
		ahead := replOffset(ctx, pc, "master_repl_offset") > cut
		return ahead && (held || window > 0 && time.Since(since) > window)
	})
	return cut, held
}

// writeAheadWindow bounds the time from the cut to the kill behind
// Sentinel. A sentinel never promotes a replica whose link has been down for
// more than ten down-after periods (10 s here) before the primary was found
// down: on a loaded machine, where until's writes came slowly, a later kill
// left the set-up with no primary for good. (A Cluster's nodes run with a
// replica validity factor of 0: any replica may be promoted.)
const writeAheadWindow = 5 * time.Second

// replOffset reads a number of INFO replication.
func replOffset(ctx context.Context, c *redis.Client, field string) int64 {
	info, _ := c.Info(ctx, "replication").Result()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// DropClients closes every client connection of every live node (CLIENT
// KILL TYPE normal), as a network fault would.
func (cl *Cluster) DropClients() int {
	n := 0
	for _, s := range cl.live() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		k, _ := c.ClientKillByFilter(context.Background(), "TYPE", "normal").Result()
		n += int(k)
		c.Close()
	}
	return n
}

// URLReplicas is URL naming every node, replicas included, so a client
// starting while a master is down still finds the Cluster.
func (cl *Cluster) URLReplicas() string {
	u := "redis://" + cl.Nodes[0].Addr()
	for i, s := range cl.all()[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr()
	}
	return u
}

// Down takes the Cluster down as one does in its first seconds, before
// every node agrees: the last slot is unassigned on every node (CLUSTER
// DELSLOTS), so every node says cluster_state:fail and answers commands
// with CLUSTERDOWN. It returns once every node says so; up assigns the slot
// back and returns once every node says ok. For a Cluster without
// replicas.
func (cl *Cluster) Down(tb testing.TB) (up func()) {
	tb.Helper()
	ctx := context.Background()
	const slot = 16383
	last := cl.Nodes[len(cl.Nodes)-1]
	// The slot's owner (the last node) forgets it first, so that no other
	// node learns it back from the owner's gossip; and a node that still
	// says ok is told again (it learnt it back from a ping under way).
	nodes := append([]*Server{last}, cl.Nodes[:len(cl.Nodes)-1]...)
	delslot := func(s *Server) error {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		err := c.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err()
		if err != nil && strings.Contains(err.Error(), "already unassigned") {
			return nil
		}
		return err
	}
	for _, s := range nodes {
		if err := delslot(s); err != nil {
			tb.Fatalf("redistest: CLUSTER DELSLOTS on %s: %v", s.Addr(), err)
		}
	}
	Eventually(tb, "every node says the cluster is down", func() bool {
		down := true
		for _, s := range nodes {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:fail") {
				down = false
				_ = delslot(s)
			}
		}
		return down
	})
	return func() {
		c := redis.NewClient(&redis.Options{Addr: last.Addr()})
		err := c.Do(ctx, "CLUSTER", "ADDSLOTS", slot).Err()
		c.Close()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTS on %s: %v", last.Addr(), err)
		}
		Eventually(tb, "every node says the cluster is ok", func() bool { return cl.ok(ctx, len(cl.Nodes)) })
	}
}
