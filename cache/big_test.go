package cache_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redmap/redmap/cache"
)

// A value past Redis's 512 MB limit on one string is stored in parts and
// comes back whole. It needs about 1.1 GiB in Redis and 3.5 GiB here, so it
// runs only when REDMAP_BIG is set: REDMAP_BIG=1 go test ./cache -run Big -v
func TestBigValue(t *testing.T) {
	if os.Getenv("REDMAP_BIG") == "" {
		t.Skip("set REDMAP_BIG=1 to store and fetch a 1.1 GiB value")
	}
	_, s, _ := setup(t, 0)
	ctx := context.Background()
	v := value(1100<<20, 9)
	start := time.Now()
	ref, uploaded, err := s.Put(ctx, v, "big", time.Minute)
	if err != nil || !uploaded {
		t.Fatalf("put: %v", err)
	}
	put := time.Since(start)
	start = time.Now()
	got, err := s.Get(ctx, ref)
	if err != nil || len(got) != len(v) || cache.Sum(got) != ref.Hash {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	t.Logf("%v: put in %v, fetched and verified in %v", ref, put, time.Since(start))
	if _, err := s.Release(ctx, ref, "big"); err != nil {
		t.Fatal(err)
	}
}
