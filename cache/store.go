// Package cache is redmap's object cache for constant data: values stored in
// Redis once under their BLAKE3 hash (Sum, Ref), held by the batches that use
// them and deleted when the last live holder lets go (Store). Each worker
// keeps the values it decoded in a memo of its own, whose counters are Stats
// (worker.Stats().Cache).
//
// What it exports, and for whom: Stats, for every user who watches a
// worker; Store, Ref and Sum, for a program other than redmap's managers
// and workers that stores or reads objects (a tool that prefills a large
// constant, or a second implementation of a worker), with DefaultPartSize.
// The layout of an object in Redis (a metadata hash and 1 MiB parts under
// "<prefix>:obj:{<hash>}", a holders sorted set of deadlines) is versioned
// with the module: it changes only with a minor version before 1.0 and a
// major one after, as CHANGELOG says.
package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zeebo/blake3"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/failure"
)

// DefaultPartSize is the size of the parts a value is stored in: small enough
// that no single command holds Redis for long, nor takes a link of 10 MB/s
// past go-redis's timeouts (broker.CallBytes, 1 MiB: an upload sends one
// pipeline per 1 MiB of parts), and far below Redis's 512 MB limit on one
// string, so values of any size fit.
const DefaultPartSize = broker.CallBytes

// Ref names a stored value by content.
type Ref struct {
	Hash string // BLAKE3-256 of the encoded value, 64 hex digits
	Size int64  // bytes
}

// Sum returns the hex BLAKE3-256 hash of b.
func Sum(b []byte) string {
	h := blake3.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Store keeps encoded values in Redis, under their hash, in parts.
type Store struct {
	objs     *redisbroker.Objects
	partSize int

	uploads       atomic.Int64
	uploadedBytes atomic.Int64
}

// NewStore returns a store under prefix on c, cutting values into parts of
// partSize bytes (DefaultPartSize if partSize <= 0).
func NewStore(c redis.UniversalClient, prefix string, partSize int) *Store {
	if partSize <= 0 {
		partSize = DefaultPartSize
	}
	return &Store{objs: redisbroker.NewObjects(c, prefix), partSize: partSize}
}

// Put stores b unless it is already there, and gives holder a hold on it for
// d by the Redis clock. It checks first, so a value already stored costs one
// script call and no upload; it reports whether it uploaded. An upload sends
// one pipeline per 1 MiB of parts (broker.CallBytes) and one script call.
func (s *Store) Put(ctx context.Context, b []byte, holder string, d time.Duration) (Ref, bool, error) {
	ref := Ref{Hash: Sum(b), Size: int64(len(b))}
	// A concurrent release can delete an older copy while we upload ours; the
	// commit then finds a part missing and we upload again.
	for range 3 {
		held, err := s.objs.Hold(ctx, ref.Hash, holder, d)
		if err != nil || held {
			return ref, false, err
		}
		var parts [][]byte
		for off := 0; off < len(b) || off == 0; off += s.partSize {
			parts = append(parts, b[off:min(off+s.partSize, len(b))])
		}
		ok, err := s.objs.Upload(ctx, ref.Hash, parts, ref.Size, holder, d)
		if err != nil {
			return ref, false, err
		}
		if ok {
			s.uploads.Add(1)
			s.uploadedBytes.Add(ref.Size)
			return ref, true, nil
		}
	}
	return ref, false, errors.New("cache: the value was deleted during each of 3 uploads")
}

// Hold renews holder's hold on ref for d; it reports false if the value is no
// longer in Redis.
func (s *Store) Hold(ctx context.Context, ref Ref, holder string, d time.Duration) (bool, error) {
	return s.objs.Hold(ctx, ref.Hash, holder, d)
}

// Release drops holder's hold; the value is deleted, in the same atomic step,
// if no live holder is left. It reports whether the value was deleted.
func (s *Store) Release(ctx context.Context, ref Ref, holder string) (bool, error) {
	return s.objs.Release(ctx, ref.Hash, holder)
}

// Get fetches ref's bytes and checks them against its hash: a value no
// longer in Redis gives failure.ErrConstantMissing, bytes that do not match
// failure.ErrConstantCorrupt. Parts are fetched pipelined, 8 per round trip.
func (s *Store) Get(ctx context.Context, ref Ref) ([]byte, error) {
	parts, size, err := s.objs.Fetch(ctx, ref.Hash)
	if errors.Is(err, redisbroker.ErrNoObject) {
		return nil, fmt.Errorf("%w: %s", failure.ErrConstantMissing, ref)
	}
	if errors.Is(err, redisbroker.ErrBadObject) {
		return nil, fmt.Errorf("%w: %s: %v", failure.ErrConstantCorrupt, ref, err)
	}
	if err != nil {
		return nil, err
	}
	var got int64
	for _, p := range parts {
		got += int64(len(p))
	}
	if got != size || size != ref.Size {
		return nil, fmt.Errorf("%w: %s: got %d bytes in %d parts", failure.ErrConstantCorrupt, ref, got, len(parts))
	}
	b := make([]byte, 0, size)
	for _, p := range parts {
		b = append(b, p...)
	}
	if Sum(b) != ref.Hash {
		return nil, fmt.Errorf("%w: %s", failure.ErrConstantCorrupt, ref)
	}
	return b, nil
}

// Uploads returns how many values this store uploaded, and their bytes.
func (s *Store) Uploads() (n, bytes int64) { return s.uploads.Load(), s.uploadedBytes.Load() }

// String returns the short form of the ref: "blake3:<first 12 hex digits> (<size> bytes)".
func (r Ref) String() string {
	h := r.Hash
	if len(h) > 12 {
		h = h[:12]
	}
	return fmt.Sprintf("blake3:%s (%d bytes)", h, r.Size)
}

// Stats counts the work of a worker's memo of constants (worker.Stats)
// since the worker was made: the values it fetched from the object cache and
// decoded, and the lookups it served from memory.
type Stats struct {
	Hits         int64 // lookups served from memory
	Misses       int64 // lookups that had to wait for a fetch (their own or a concurrent one)
	Fetches      int64 // values fetched from Redis
	BytesFetched int64 // bytes fetched from Redis
	Decodes      int64 // values decoded
	Evictions    int64 // values evicted to stay within the bound
	Bytes        int64 // encoded bytes of the values held now
	Entries      int   // values held now
}
