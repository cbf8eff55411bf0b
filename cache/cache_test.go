package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// setup returns the test's client of the tests' Redis (one server, or the
// Cluster of make test-cluster), a store under a prefix of its own, and the
// prefix.
func setup(t *testing.T, partSize int) (redis.UniversalClient, *cache.Store, string) {
	t.Helper()
	env := harness.Setup(t)
	prefix := env.Queue // a prefix of our own: object keys are not per queue
	return env.Client, cache.NewStore(env.Client, prefix, partSize), prefix
}

func value(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func objectKeys(t *testing.T, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	return (&harness.Env{Client: c}).Keys(t, prefix+":obj:*")
}

// A value bigger than a part is stored in parts and comes back whole; a
// second Put of it uploads nothing; the last release deletes every key.
func TestPutGetParts(t *testing.T) {
	c, s, prefix := setup(t, 1000)
	ctx := context.Background()
	v := value(10_500, 1) // 11 parts, the last one short

	ref, uploaded, err := s.Put(ctx, v, "a", time.Minute)
	if err != nil || !uploaded {
		t.Fatalf("first put: uploaded=%v err=%v", uploaded, err)
	}
	if n := len(objectKeys(t, c, prefix)); n != 11+2 {
		t.Fatalf("%d object keys, want 11 parts + metadata + holders", n)
	}
	ref2, uploaded, err := s.Put(ctx, v, "b", time.Minute)
	if err != nil || uploaded || ref2 != ref {
		t.Fatalf("second put: uploaded=%v ref=%v err=%v; want no upload", uploaded, ref2, err)
	}
	if n, bytes := s.Uploads(); n != 1 || bytes != int64(len(v)) {
		t.Fatalf("uploads %d (%d bytes), want 1 (%d)", n, bytes, len(v))
	}
	got, err := s.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}

	if deleted, err := s.Release(ctx, ref, "a"); err != nil || deleted {
		t.Fatalf("release a: deleted=%v err=%v; b still holds it", deleted, err)
	}
	if _, err := s.Get(ctx, ref); err != nil {
		t.Fatalf("get while b holds: %v", err)
	}
	if deleted, err := s.Release(ctx, ref, "b"); err != nil || !deleted {
		t.Fatalf("release b: deleted=%v err=%v; want deleted", deleted, err)
	}
	if ks := objectKeys(t, c, prefix); len(ks) != 0 {
		t.Fatalf("keys left after the last release: %v", ks)
	}
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantMissing) {
		t.Fatalf("get after delete: got %v, want ErrConstantMissing", err)
	}
}

func TestEmptyValue(t *testing.T) {
	_, s, _ := setup(t, 0)
	ctx := context.Background()
	ref, _, err := s.Put(ctx, nil, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, ref); err != nil || len(got) != 0 {
		t.Fatalf("get empty: %q, %v", got, err)
	}
}

// A holder that dies without releasing leaks nothing: when its hold expires,
// Redis deletes every key of the value.
func TestExpiredHoldDeletesValue(t *testing.T) {
	c, s, prefix := setup(t, 100)
	ref, _, err := s.Put(context.Background(), value(1000, 2), "dies", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(objectKeys(t, c, prefix)) == 0 {
		t.Fatal("nothing stored")
	}
	redistest.Eventually(t, fmt.Sprintf("keys of %v gone after its only hold expired", ref), func() bool {
		return len(objectKeys(t, c, prefix)) == 0
	})
}

// A release prunes expired holds: a live holder keeps the value, a dead one
// does not.
func TestReleaseIgnoresExpiredHolders(t *testing.T) {
	c, s, prefix := setup(t, 0)
	ctx := context.Background()
	v := value(100, 3)
	ref, _, _ := s.Put(ctx, v, "live", time.Minute)
	// A hold that ended a second ago, by the Redis clock.
	if _, err := s.Hold(ctx, ref, "dead", -time.Second); err != nil {
		t.Fatal(err)
	}
	if deleted, _ := s.Release(ctx, ref, "live"); !deleted {
		t.Fatal("the only live holder released, but the value was kept for a dead one")
	}
	if ks := objectKeys(t, c, prefix); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
	}
}

// Several managers hold and release one value concurrently while one long
// holder keeps it: it is never deleted while held, and it is deleted at the
// end.
func TestConcurrentHoldReleaseChurn(t *testing.T) {
	c, s, prefix := setup(t, 64)
	ctx := context.Background()
	v := value(1000, 4)
	ref, _, err := s.Put(ctx, v, "long", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	churn(t, c, prefix, v, "g", true)
	if deleted, err := s.Release(ctx, ref, "long"); err != nil || !deleted {
		t.Fatalf("last release: deleted=%v, %v", deleted, err)
	}
	// Without a long holder, churners may delete and re-upload the value, but
	// each always finds it while it holds it.
	churn(t, c, prefix, v, "h", false)
	if ks := objectKeys(t, c, prefix); len(ks) != 0 {
		t.Fatalf("keys left after every holder released: %v", ks)
	}
}

// churn runs 8 goroutines, each with its own store as separate managers
// would have, each putting, getting and releasing v 100 times. With kept,
// another holder keeps v throughout, so no release may delete it.
func churn(t *testing.T, c redis.UniversalClient, prefix string, v []byte, tag string, kept bool) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := cache.NewStore(c, prefix, 64)
			for i := range 100 {
				holder := fmt.Sprintf("%s%d-%d", tag, g, i)
				ref, _, err := mine.Put(ctx, v, holder, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if got, err := mine.Get(ctx, ref); err != nil || !bytes.Equal(got, v) {
					errs <- fmt.Errorf("%s holds the value but cannot get it: %v", holder, err)
					return
				}
				deleted, err := mine.Release(ctx, ref, holder)
				if err != nil || (kept && deleted) {
					errs <- fmt.Errorf("%s released: deleted=%v err=%v, while another holds it", holder, deleted, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestTamperedValue(t *testing.T) {
	c, s, prefix := setup(t, 100)
	ctx := context.Background()
	v := value(250, 5)
	ref, _, _ := s.Put(ctx, v, "a", time.Minute)
	// Same length, other bytes.
	c.Set(ctx, keys.ObjectPart(prefix, ref.Hash, 1), bytes.Repeat([]byte{'x'}, 100), time.Minute)
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantCorrupt) {
		t.Fatalf("tampered part: got %v, want ErrConstantCorrupt", err)
	}
	// Another length.
	c.Set(ctx, keys.ObjectPart(prefix, ref.Hash, 1), "short", time.Minute)
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantCorrupt) {
		t.Fatalf("truncated part: got %v, want ErrConstantCorrupt", err)
	}
	// A part gone.
	c.Del(ctx, keys.ObjectPart(prefix, ref.Hash, 2))
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantMissing) {
		t.Fatalf("missing part: got %v, want ErrConstantMissing", err)
	}
}

// Parts larger than a worker's call may carry (broker.CallBytes) are fetched
// one a round trip: the value comes back whole; a part too long is
// corrupt, a part gone is missing.
func TestPartsLargerThanACall(t *testing.T) {
	c, s, prefix := setup(t, 3<<20)
	ctx := context.Background()
	v := value(7<<20+5, 7) // parts of 3 MiB, 3 MiB and 1 MiB and 5 bytes
	ref, _, err := s.Put(ctx, v, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get: %d bytes of %d, %v", len(got), len(v), err)
	}
	c.Append(ctx, keys.ObjectPart(prefix, ref.Hash, 0), "more")
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantCorrupt) {
		t.Fatalf("a part too long: got %v, want ErrConstantCorrupt", err)
	}
	c.Del(ctx, keys.ObjectPart(prefix, ref.Hash, 1))
	if _, err := s.Get(ctx, ref); !errors.Is(err, failure.ErrConstantMissing) {
		t.Fatalf("a part gone: got %v, want ErrConstantMissing", err)
	}
}
