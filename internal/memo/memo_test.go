package memo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/memo"
	"github.com/redmap/redmap/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// setup returns a store under a prefix of the test's own.
func setup(t *testing.T, partSize int) (struct{}, *cache.Store, string) {
	t.Helper()
	env := harness.Setup(t)
	return struct{}{}, cache.NewStore(env.Client, env.Queue, partSize), env.Queue
}

func value(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// Concurrent lookups of a missing value fetch and decode it once.
func TestMemoSingleFlight(t *testing.T) {
	_, s, _ := setup(t, 1000)
	ctx := context.Background()
	v := value(100_000, 6)
	ref, _, _ := s.Put(ctx, v, "a", time.Minute)
	m := memo.New(s, 1<<20)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.Get(ctx, ref, "bytes", func(b []byte) (any, error) { return len(b), nil })
			if err != nil || got != len(v) {
				t.Errorf("memo get: %v, %v", got, err)
			}
		}()
	}
	wg.Wait()
	st := m.Stats()
	if st.Fetches != 1 || st.Decodes != 1 || st.BytesFetched != int64(len(v)) || st.Hits+st.Misses != 32 {
		t.Fatalf("stats %+v: want 1 fetch of %d bytes, 1 decode, 32 lookups", st, len(v))
	}
}

// The memo evicts least recently used values to stay within its byte bound,
// and fetches an evicted value again when it is needed.
func TestMemoEvictsByBytes(t *testing.T) {
	_, s, _ := setup(t, 0)
	ctx := context.Background()
	var refs []cache.Ref
	for i := range 3 {
		ref, _, err := s.Put(ctx, value(1000, byte(10+i)), "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	m := memo.New(s, 2500) // room for two values of 1,000 bytes
	decode := func(b []byte) (any, error) { return b[0], nil }
	for _, i := range []int{0, 1, 2, 0} { // the second 0 was evicted by 2
		if _, err := m.Get(ctx, refs[i], "k", decode); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	if st.Fetches != 4 || st.Evictions != 2 || st.Bytes != 2000 || st.Entries != 2 {
		t.Fatalf("stats %+v: want 4 fetches, 2 evictions, 2 entries of 2000 bytes", st)
	}
	if _, err := m.Get(ctx, refs[0], "k", decode); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Fetches != 4 || st.Hits != 1 {
		t.Fatalf("stats %+v: the last lookup should be a hit", st)
	}
	// The same bytes decoded as another kind are another entry.
	if _, err := m.Get(ctx, refs[0], "other", decode); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Fetches != 5 {
		t.Fatalf("stats %+v: another kind should fetch", st)
	}
}
