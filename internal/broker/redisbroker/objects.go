package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// partsPerTrip caps the parts sent or fetched in one pipeline, so a 1 GiB
// object does not sit whole in a client buffer twice.
const partsPerTrip = 8

// Objects speaks the object cache's protocol: content-addressed objects in
// parts, held by batches.
type Objects struct {
	c      redis.UniversalClient
	prefix string
}

// NewObjects returns the object protocol under prefix on c.
func NewObjects(c redis.UniversalClient, prefix string) *Objects {
	followFailovers(c)
	return &Objects{c: c, prefix: prefix}
}

// Hold adds or renews holder's hold on object h for d, by the Redis clock. It
// reports false if the object is not there. One script call.
func (o *Objects) Hold(ctx context.Context, h, holder string, d time.Duration) (bool, error) {
	ks := []string{keys.Object(o.prefix, h), keys.ObjectHolders(o.prefix, h)}
	n, err := holdScript.run(ctx, o.c, ks, holder, d.Milliseconds()).Int()
	if err != nil {
		return false, wrap("hold object", holdScript, "", err)
	}
	return n == 1, nil
}

// Upload stores the parts of object h, each expiring after d unless a commit
// holds them, then commits the object and gives holder a hold for d. It
// reports false if a part vanished before the commit (upload again). One
// pipeline per CallBytes of parts (a larger part alone), then one script
// call.
func (o *Objects) Upload(ctx context.Context, h string, parts [][]byte, size int64, holder string, d time.Duration) (bool, error) {
	sizes := make([]int, len(parts))
	for i, p := range parts {
		sizes[i] = len(p)
	}
	for start := 0; start < len(parts); {
		end := start + broker.Within(sizes[start:], broker.CallBytes)
		_, err := o.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < end; i++ {
				p.Set(ctx, keys.ObjectPart(o.prefix, h, i), parts[i], d)
			}
			return nil
		})
		start = end
		if err != nil {
			return false, wrap("upload object", nil, "SET", err)
		}
	}
	ks := []string{keys.Object(o.prefix, h), keys.ObjectHolders(o.prefix, h)}
	n, err := holdScript.run(ctx, o.c, ks, holder, d.Milliseconds(), size, len(parts)).Int()
	if err != nil {
		return false, wrap("commit object", holdScript, "", err)
	}
	return n == 1, nil
}

// Release drops holder's hold on object h and deletes the object if no live
// holder is left, atomically. It reports whether the object was deleted.
func (o *Objects) Release(ctx context.Context, h, holder string) (bool, error) {
	ks := []string{keys.Object(o.prefix, h), keys.ObjectHolders(o.prefix, h)}
	n, err := releaseScript.run(ctx, o.c, ks, holder).Int()
	if err != nil {
		return false, wrap("release object", releaseScript, "", err)
	}
	return n == 1, nil
}

// ErrNoObject is returned by Fetch for an object that is not in Redis.
var ErrNoObject = errors.New("no such object")

// ErrBadObject is returned by Fetch for an object whose record or parts
// contradict each other: bytes that no Upload wrote.
var ErrBadObject = errors.New("malformed object")

// Fetch returns the parts of object h and its recorded size: one round trip
// for the metadata, then round trips of as many parts as fit in CallBytes,
// or of one part if they are larger (an upload's part size, at most
// cache.DefaultPartSize by default).
func (o *Objects) Fetch(ctx context.Context, h string) ([]string, int64, error) {
	meta, err := o.c.HMGet(ctx, keys.Object(o.prefix, h), "size", "parts").Result()
	if err != nil {
		return nil, 0, wrap("fetch object", nil, "HMGET or GET", err)
	}
	sizeS, _ := meta[0].(string)
	partsS, _ := meta[1].(string)
	if sizeS == "" || partsS == "" {
		return nil, 0, ErrNoObject
	}
	size, err1 := strconv.ParseInt(sizeS, 10, 64)
	n, err2 := strconv.Atoi(partsS)
	// Every part but the one of an empty object holds a byte at least, so
	// more parts than bytes is a forged record; what is fetched is counted
	// against size as it comes, so a record cannot make this allocate more
	// than the parts Redis really holds, nor more than size.
	if err1 != nil || err2 != nil || n < 1 || size < 0 || int64(n) > max(size, 1) {
		return nil, 0, fmt.Errorf("%w: object %s: bad metadata (size %.20q, parts %.20q)", ErrBadObject, h, sizeS, partsS)
	}
	parts := make([]string, 0, min(n, partsPerTrip))
	var got int64
	keep := func(part string) error {
		if got += int64(len(part)); got > size {
			return fmt.Errorf("%w: object %s: its parts hold more than its recorded size of %d bytes", ErrBadObject, h, size)
		}
		parts = append(parts, part)
		return nil
	}
	// The parts of one upload are all of one size but the last: as many as
	// fit in CallBytes, or one, go in a round trip.
	each := (size + int64(n) - 1) / int64(n)
	perTrip := int(min(partsPerTrip, max(1, broker.CallBytes/max(each, 1))))
	for start := 0; start < n; start += perTrip {
		cmds, err := o.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+perTrip, n); i++ {
				p.Get(ctx, keys.ObjectPart(o.prefix, h, i))
			}
			return nil
		})
		if errors.Is(err, redis.Nil) {
			return nil, 0, ErrNoObject
		}
		if err != nil {
			return nil, 0, wrap("fetch object", nil, "HMGET or GET", err)
		}
		for _, c := range cmds {
			if err := keep(c.(*redis.StringCmd).Val()); err != nil {
				return nil, 0, err
			}
		}
	}
	return parts, size, nil
}
