package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// An owner's keeper renews nothing before the owner's first claim has
// returned: a claim it took meanwhile would be a second one, with the next
// token, while the owner's fence kept the first, and the owner's writes
// would be refused as fenced (a durable submit then failed with "manager
// closed" when its keeper ticked during a slow first claim).
func TestRenewClaimAwaitsTheFirstClaim(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	queue := redistest.Queue(t)
	m, err := New(c, Options{Queue: queue, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	o, err := m.newOwner(ctx, "first-claim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.detach(redmap.ErrClosed) })
	owner := id.Durable("first-claim")
	fence := keys.Fence("redmap", queue, owner)

	o.renewClaim(ctx) // the keeper's tick, before the first claim returned
	if err := c.Get(ctx, fence).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a renewal before the first claim took one: fence %v", err)
	}
	if err := o.claim(ctx); err != nil {
		t.Fatal(err)
	}
	o.renewClaim(ctx)
	if got := c.Get(ctx, fence).Val(); got != o.owned.fence.Record() || got == "" {
		t.Fatalf("the batch's fence %q, the owner's %q: want one claim, its own", got, o.owned.fence.Record())
	}
}
