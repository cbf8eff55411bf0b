package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

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
// every node reports the cluster ok and knows every slot's owner. All are
// stopped when tb ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	cl := &Cluster{}
	for range n {
		s, err := startAs(&Server{busPort: true, args: []string{
			"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "yes",
		}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(s.Stop)
		cl.Nodes = append(cl.Nodes, s)
	}
	ctx := context.Background()
	for i, s := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			c.Close()
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, s.Addr(), err)
		}
		if i > 0 {
			if err := c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(cl.Nodes[0].Port)).Err(); err != nil {
				c.Close()
				tb.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
		}
		c.Close()
	}
	Eventually(tb, "the cluster ok on every node", func() bool {
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
	})
	return cl
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
