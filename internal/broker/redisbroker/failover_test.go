package redisbroker

import (
	"runtime"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/redistest"
)

// followedCount counts the Cluster clients that have the reload hook.
func followedCount() int {
	n := 0
	followed.Range(func(any, any) bool { n++; return true })
	return n
}

// A program that makes a Cluster client per job does not keep every one it
// made (issue 37: the set of clients given the reload hook only grew). No
// server is needed: a Cluster client dials only when it is used.
func TestFollowedClientsCollected(t *testing.T) {
	before := followedCount()
	for range 100 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
		followFailovers(c)
		followFailovers(c) // once per client
		c.Close()
	}
	if n := followedCount(); n > before+100 {
		t.Fatalf("%d clients followed, want at most %d", n, before+100)
	}
	redistest.Eventually(t, "the closed clients forgotten", func() bool {
		runtime.GC()
		return followedCount() <= before
	})
}
