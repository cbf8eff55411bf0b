package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// objectKeys returns the object cache's keys under the default prefix whose
// hash is h.
func objectKeys(t *testing.T, b *harness.Env, h string) []string {
	t.Helper()
	return b.Keys(t, keys.Object("redmap", h)+"*")
}

// Four worker processes run 1,000 tasks over one large constant: each fetches
// and decodes it exactly once; the manager uploads it once; it is gone from
// Redis when the batch ends. REDMAP_CONST_MB sets its size (default 50).
func TestConstantFetchedOncePerWorkerProcess(t *testing.T) {
	redistest.Slow(t) // before the constant is built: it starts worker processes
	b := setup(t)
	mb := 50
	if s := os.Getenv("REDMAP_CONST_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	tab := table(mb << 20)
	env := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue}
	var workers []*harness.Proc
	var ids []string
	for range 4 {
		c := startChild(t, "worker", env...)
		workers = append(workers, c)
		ids = append(ids, c.Expect(t, "worker "))
	}
	m := b.Manager(t, manager.Options{})
	harness.WaitLive(t, m, ids...)

	xs := ints(1000)
	start := time.Now()
	ys, err := manager.MapWith(testCtx(t), m, lookup, tab, xs, manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	for i, y := range ys {
		if y != tab[xs[i]%len(tab)] {
			t.Fatalf("ys[%d] = %d, want %d", i, y, tab[i])
		}
	}
	if st := m.Stats(); st.ConstantUploads != 1 || st.ConstantBytes < int64(len(tab)) {
		t.Fatalf("uploads %d (%d bytes), want 1 of at least %d", st.ConstantUploads, st.ConstantBytes, len(tab))
	}
	ref := cache.Ref{Hash: cache.Sum(mustEncode(t, tab))}
	if ks := objectKeys(t, b, ref.Hash); len(ks) != 0 {
		t.Fatalf("the constant is still in Redis after its batch ended: %v", ks)
	}

	var lookups int64
	for i, c := range workers {
		st := stats(t, c).Cache
		lookups += st.Hits + st.Misses
		t.Logf("worker %d: %d tasks, %d fetch, %d bytes fetched, %d decode, %d hits, %d misses",
			i, st.Hits+st.Misses, st.Fetches, st.BytesFetched, st.Decodes, st.Hits, st.Misses)
		if st.Hits+st.Misses > 0 && (st.Fetches != 1 || st.Decodes != 1 || st.BytesFetched < int64(len(tab))) {
			t.Errorf("worker %d: %+v; want exactly one fetch and one decode of the %d-byte constant", i, st, len(tab))
		}
	}
	if lookups != int64(len(xs)) {
		t.Fatalf("workers looked up the constant %d times, want once per task (%d)", lookups, len(xs))
	}
	t.Logf("%d tasks over a %d MiB constant on 4 worker processes in %v", len(xs), mb, elapsed)
}

func mustEncode(t *testing.T, v []byte) []byte {
	t.Helper()
	// The manager stores the MessagePack encoding of the constant: a bin header
	// and the bytes.
	var hdr []byte
	switch n := len(v); {
	case n < 1<<8:
		hdr = []byte{0xc4, byte(n)}
	case n < 1<<16:
		hdr = []byte{0xc5, byte(n >> 8), byte(n)}
	default:
		hdr = []byte{0xc6, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(hdr, v...)
}

// Two batches with one constant upload it once, and it is deleted only when
// both have ended.
func TestConstantSharedByTwoBatches(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	gated := redmap.FuncWith("gated", func(_ context.Context, tab []byte, x int) (byte, error) {
		<-release
		return tab[x], nil
	})
	b.Worker(t, worker.Options{Concurrency: 4}, gated)
	m1 := b.Manager(t, manager.Options{})
	m2 := b.Manager(t, manager.Options{})
	tab := table(1 << 20)
	ctx := testCtx(t)

	b1, err := manager.SubmitWith(ctx, m1, gated, tab, ints(10))
	if err != nil {
		t.Fatal(err)
	}
	b2, err := manager.SubmitWith(ctx, m2, gated, tab, ints(10))
	if err != nil {
		t.Fatal(err)
	}
	n1 := m1.Stats().ConstantUploads
	n2 := m2.Stats().ConstantUploads
	if n1+n2 != 1 {
		t.Fatalf("uploads: %d + %d, want 1 in all", n1, n2)
	}
	h := cache.Sum(mustEncode(t, tab))
	if len(objectKeys(t, b, h)) == 0 {
		t.Fatal("the constant is not in Redis")
	}
	close(release)
	if _, err := b1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "constant deleted after both batches", func() bool { return len(objectKeys(t, b, h)) == 0 })
}

// A manager killed with SIGKILL leaks nothing: its hold expires and the
// constant is deleted.
func TestKilledManagersConstantExpires(t *testing.T) {
	b := setup(t)
	const size = 3 << 20
	c := startChild(t, "manager", "REDMAP_URL="+b.URL, "REDMAP_QUEUE="+b.Queue, "REDMAP_CONST_BYTES="+strconv.Itoa(size))
	c.Expect(t, "submitted")
	h := cache.Sum(mustEncode(t, table(size)))
	if len(objectKeys(t, b, h)) == 0 {
		t.Fatal("the constant is not in Redis")
	}
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.Exited()
	killed := time.Now()
	eventually(t, "constant of a killed manager deleted", func() bool { return len(objectKeys(t, b, h)) == 0 })
	t.Logf("constant deleted %v after SIGKILL (KeyTTL 3s)", time.Since(killed).Round(100*time.Millisecond))
	// Its task set and result list expire too.
	eventually(t, "task set of a killed manager expired", func() bool {
		return len(b.Keys(t, keys.Base("redmap", b.Queue)+"m:*")) == 0
	})
}

// A constant tampered with in Redis fails its elements with
// ErrConstantCorrupt; one gone from Redis (deleted by hand, or lost in a
// failover) is stored again by its manager within a Poll while the worker
// waits for it, and the batch ends exact; the worker keeps serving.
func TestConstantTamperedOrMissing(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{PartSize: 1000})
	ctx := testCtx(t)

	// Store the constant as the manager will, and tamper with its part 2
	// (same length, other bytes) before any worker has fetched it.
	tab := table(5000)
	store := cache.NewStore(b.Client, "redmap", 1000)
	ref, _, err := store.Put(ctx, mustEncode(t, tab), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b.Client.Set(ctx, keys.ObjectPart("redmap", ref.Hash, 2), make([]byte, 1000), time.Minute)
	b.Worker(t, worker.Options{}, lookup, square)
	_, err = manager.MapWith(ctx, m, lookup, tab, ints(4), manager.ChunkSize(2))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 4 || !errors.Is(err, redmap.ErrConstantCorrupt) {
		t.Fatalf("tampered constant: got %v, want 4 elements failing with ErrConstantCorrupt", err)
	}
	if n := m.Stats().ConstantUploads; n != 0 {
		t.Fatalf("the manager uploaded %d times a constant already stored", n)
	}

	// On a queue with no worker yet, submit, then delete the constant.
	other := b.Queue + ".other"
	m2, err := manager.New(b.Client, manager.Options{Queue: other})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	tab2 := table(3000)
	batch, err := manager.SubmitWith(ctx, m2, lookup, tab2, ints(3))
	if err != nil {
		t.Fatal(err)
	}
	h2 := cache.Sum(mustEncode(t, tab2))
	if n := b.Client.Del(ctx, objectKeys(t, b, h2)...).Val(); n == 0 {
		t.Fatal("the second constant was not stored")
	}
	(&harness.Env{Srv: b.Srv, Client: b.Client, URL: b.URL, Queue: other}).Worker(t, worker.Options{}, lookup)
	ys, err := batch.Wait(ctx)
	if err != nil || len(ys) != 3 || ys[2] != tab2[2] {
		t.Fatalf("deleted constant: got %v, %v; want it stored again and the batch exact", ys, err)
	}
	if n := m2.Stats().ConstantUploads; n != 2 {
		t.Fatalf("the deleted constant was uploaded %d times, want 2", n)
	}

	if ys, err := manager.Map(ctx, m, square, ints(3)); err != nil || ys[2] != 4 {
		t.Fatalf("the worker no longer serves: %v, %v", ys, err)
	}
}

// A lookup table held in a Go map is one constant however often it is
// encoded: two managers mapping with the same map while both batches run
// upload it once between them, and the worker fetches and decodes it once.
func TestMapConstantStoredOnce(t *testing.T) {
	b := setup(t)
	gate := make(chan struct{})
	counts := redmap.FuncWith("count", func(_ context.Context, tab map[string]int, w string) (int, error) {
		<-gate
		return tab[w], nil
	})
	tab := make(map[string]int, 100_000)
	for i := range 100_000 {
		tab[fmt.Sprint("word", i)] = i
	}
	w := b.Worker(t, worker.Options{Concurrency: 2}, counts)
	words := []string{"word1", "word99999", "nope"}
	var batches []*manager.Batch[int]
	var uploads int64
	for range 2 {
		m := b.Manager(t, manager.Options{})
		batch, err := manager.SubmitWith(testCtx(t), m, counts, tab, words)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, batch)
		n := m.Stats().ConstantUploads
		uploads += n
	}
	close(gate)
	for _, batch := range batches {
		ys, err := batch.Wait(testCtx(t))
		if err != nil || ys[0] != 1 || ys[1] != 99999 || ys[2] != 0 {
			t.Fatalf("MapWith: %v %v", ys, err)
		}
	}
	st := w.Stats().Cache
	t.Logf("2 managers: %d upload(s); worker: %+v", uploads, st)
	if uploads != 1 || st.Fetches != 1 || st.Decodes != 1 {
		t.Fatalf("%d uploads, %d fetches, %d decodes; want 1 of each", uploads, st.Fetches, st.Decodes)
	}
}
