package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters on loopback ports, as a test's own;
// see StartCluster.
type Cluster struct {
	Nodes    []*Server // the masters at the start, slots split evenly among them in order
	Replicas []*Server // with StartClusterReplicas: Replicas[i] replicated Nodes[i] at the start
}

// StartCluster starts n masters with cluster mode on (each on a port below
// 55000, its bus on port+10000), splits the 16,384 slots evenly among them
// (CLUSTER ADDSLOTSRANGE), introduces them (CLUSTER MEET), and returns once
// every node reports the cluster ok and knows every node. All are stopped
// when tb ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	Slow(tb)
	cl, err := startCluster(n, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Stop)
	return cl
}

// StartClusterReplicas is StartCluster with one replica per master (each
// started after the masters agree, set with CLUSTER REPLICATE), returning
// once every node says the cluster is ok and knows all 2n nodes and every
// replica has finished its first sync: a Cluster that can fail over.
func StartClusterReplicas(tb testing.TB, n int) *Cluster {
	tb.Helper()
	Slow(tb)
	cl, err := startCluster(n, true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Stop)
	return cl
}

// StartClusterServers starts a Cluster of n masters outside a test (for the
// benchmark); Stop it when done.
func StartClusterServers(n int) (*Cluster, error) { return startCluster(n, false) }

// nodeArgs are every Cluster node's settings: a 2 s node timeout, so a
// master's death is noticed and its replica promoted in about 3-4 s; a
// replica's full sync starts at once (diskless syncs wait 5 s by default
// for more replicas to share them); a replica may be promoted however long
// its link has been down (a validity factor of 0), as KillMasterLosingWrites
// needs on a loaded machine: by default, a link down for 20 s (10 node
// timeouts) before the master died leaves its slots with no master.
var nodeArgs = []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "yes",
	"--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0"}

func startCluster(n int, replicas bool) (*Cluster, error) {
	cl := &Cluster{}
	for range n {
		s, err := startAs(&Server{busPort: true, args: nodeArgs})
		if err != nil {
			cl.Stop()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, s)
	}
	ctx := context.Background()
	for i, s := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		lo, hi := i*16384/n, (i+1)*16384/n-1
		err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err == nil && i > 0 {
			err = c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(cl.Nodes[0].Port)).Err()
		}
		c.Close()
		if err != nil {
			cl.Stop()
			return nil, fmt.Errorf("redistest: setting up cluster node %s: %w", s.Addr(), err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !cl.ok(ctx, n) {
		if time.Now().After(deadline) {
			cl.Stop()
			return nil, errors.New("redistest: the cluster was not ok on every node within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if replicas {
		if err := cl.addReplicas(ctx); err != nil {
			cl.Stop()
			return nil, err
		}
	}
	return cl, nil
}

// addReplicas starts a replica for each master and waits until the Cluster
// is whole again with every replica synced.
func (cl *Cluster) addReplicas(ctx context.Context) error {
	if err := cl.startReplicas(ctx); err != nil {
		return err
	}
	return cl.waitReplicas(ctx)
}

// startReplicas starts a replica for each master.
func (cl *Cluster) startReplicas(ctx context.Context) error {
	for _, m := range cl.Nodes {
		s, err := startAs(&Server{busPort: true, args: nodeArgs})
		if err != nil {
			return err
		}
		cl.Replicas = append(cl.Replicas, s)
		mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		mid, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
		mc.Close()
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err == nil {
			err = c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(m.Port)).Err()
		}
		// The replica must know its master before it can follow it.
		deadline := time.Now().Add(20 * time.Second)
		for err == nil {
			err = c.Do(ctx, "CLUSTER", "REPLICATE", mid).Err()
			if err == nil || time.Now().After(deadline) {
				break
			}
			err = nil
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("redistest: setting up replica %s of %s: %w", s.Addr(), m.Addr(), err)
		}
	}
	return nil
}

// waitReplicas waits until the Cluster is healthy.
func (cl *Cluster) waitReplicas(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cl.healthy(ctx) {
		if time.Now().After(deadline) {
			return errors.New("redistest: the cluster's replicas were not all in sync and known to every node within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// ok reports whether every node says the cluster is ok, with every slot
// served and all n nodes known.
func (cl *Cluster) ok(ctx context.Context, n int) bool {
	for _, s := range cl.Nodes {
		if !s.alive() {
			continue // killed
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		info, err := c.ClusterInfo(ctx).Result()
		c.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
			return false
		}
	}
	return true
}

// Stop kills every node.
func (cl *Cluster) Stop() {
	for _, s := range cl.all() {
		s.Stop()
	}
}

// Addrs returns the nodes' addresses.
func (cl *Cluster) Addrs() []string {
	var out []string
	for _, s := range cl.Nodes {
		out = append(out, s.Addr())
	}
	return out
}

// URL returns the cluster's URL in connect.URL's form:
// redis://node1?addr=node2&addr=node3.
func (cl *Cluster) URL() string {
	u := "redis://" + cl.Nodes[0].Addr()
	for i, s := range cl.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr()
	}
	if len(cl.Nodes) == 1 {
		u += "?cluster=true"
	}
	return u
}

// Client returns a cluster client, closed when tb ends.
func (cl *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	tb.Cleanup(func() { c.Close() })
	return c
}

// FlushAll deletes every key on every master.
func (cl *Cluster) FlushAll(tb testing.TB) {
	tb.Helper()
	if cl.Replicas == nil {
		for _, s := range cl.Nodes {
			s.FlushAll(tb)
		}
		return
	}
	for _, s := range cl.Masters(tb) {
		s.FlushAll(tb)
	}
}

// NodeOf returns the node that owned key's slot when the cluster started
// (see MasterOf for the one that owns it now).
func (cl *Cluster) NodeOf(tb testing.TB, key string) *Server {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr()})
	defer c.Close()
	slot, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		tb.Fatal(err)
	}
	n := len(cl.Nodes)
	for i := range n {
		if int(slot) <= (i+1)*16384/n-1 {
			return cl.Nodes[i]
		}
	}
	return cl.Nodes[n-1]
}

// id returns a node's cluster node id.
func (s *Server) id(tb testing.TB) string {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	id, err := c.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// MigrateSlot moves key's slot from the node that has it to the node to, as
// redis-cli --cluster reshard does: IMPORTING on to, MIGRATING on the
// source, MIGRATE of the slot's keys perBatch at a time (calling between(n)
// after each batch, n the keys moved so far), then SETSLOT NODE on both. It
// returns the keys moved.
func (cl *Cluster) MigrateSlot(tb testing.TB, key string, to *Server, perBatch int, between func(moved int)) int {
	tb.Helper()
	ctx := context.Background()
	from := cl.NodeOf(tb, key)
	if cl.Replicas != nil {
		from = cl.MasterOf(tb, key)
	}
	src := redis.NewClient(&redis.Options{Addr: from.Addr()})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.Addr()})
	defer dst.Close()
	slot, err := src.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		tb.Fatal(err)
	}
	fromID, toID := from.id(tb), to.id(tb)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		tb.Fatalf("SETSLOT IMPORTING: %v", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		tb.Fatalf("SETSLOT MIGRATING: %v", err)
	}
	moved := 0
	for {
		ks, err := src.ClusterGetKeysInSlot(ctx, int(slot), perBatch).Result()
		if err != nil {
			tb.Fatal(err)
		}
		if len(ks) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
			tb.Fatalf("MIGRATE: %v", err)
		}
		moved += len(ks)
		if between != nil {
			between(moved)
		}
	}
	for _, c := range []*redis.Client{dst, src} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
			tb.Fatalf("SETSLOT NODE: %v", err)
		}
	}
	return moved
}
