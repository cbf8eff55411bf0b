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
	Nodes []*Server // the masters, slots split evenly among them in order
}

// StartCluster starts n masters with cluster mode on (each on a port below
// 55000, its bus on port+10000), splits the 16,384 slots evenly among them
// (CLUSTER ADDSLOTSRANGE), introduces them (CLUSTER MEET), and returns once
// every node reports the cluster ok and knows every node. All are stopped
// when tb ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	cl, err := startCluster(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Stop)
	return cl
}

// StartClusterServers starts a Cluster of n masters outside a test (for the
// benchmark); Stop it when done.
func StartClusterServers(n int) (*Cluster, error) { return startCluster(n) }

func startCluster(n int) (*Cluster, error) {
	cl := &Cluster{}
	for range n {
		s, err := startAs(&Server{busPort: true, args: []string{
			"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "yes",
		}})
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
	return cl, nil
}

// ok reports whether every node says the cluster is ok, with every slot
// served and all n nodes known.
func (cl *Cluster) ok(ctx context.Context, n int) bool {
	for _, s := range cl.Nodes {
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
	for _, s := range cl.Nodes {
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

// URL returns the cluster's URL in redmap.Connect's form:
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

// FlushAll deletes every key on every node.
func (cl *Cluster) FlushAll(tb testing.TB) {
	tb.Helper()
	for _, s := range cl.Nodes {
		s.FlushAll(tb)
	}
}

// NodeOf returns the node that owned key's slot when the cluster started.
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
