// Package config holds what managers and workers configure alike: the queue
// they meet on, the prefix of every key, and the cap on a frame read from
// Redis. manager.Options and worker.Options keep their own fields (so a
// composite literal names them directly) and resolve them here.
package config

import (
	"fmt"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/keys"
)

// Defaults of the shared fields.
const (
	DefaultPrefix   = "redmap"
	DefaultMaxFrame = codec.DefaultMaxFrame
)

// Shared is the options both sides have.
type Shared struct {
	Queue    string // required; no '{' or '}' (they delimit its Cluster hash tag), no '#' (it names shards)
	Prefix   string // of every key; default DefaultPrefix
	MaxFrame int    // bytes; default DefaultMaxFrame
}

// Resolve validates s and fills in its defaults. Errors name the field as
// side's users write it: "manager: Options.Queue is required".
func (s *Shared) Resolve(side string) error {
	switch {
	case s.Queue == "":
		return fmt.Errorf("%s: Options.Queue is required", side)
	case keys.CheckQueue(s.Queue) != nil:
		return fmt.Errorf("%s: Options.Queue: %w", side, keys.CheckQueue(s.Queue))
	case s.MaxFrame < 0:
		return fmt.Errorf("%s: Options.MaxFrame %d is negative", side, s.MaxFrame)
	}
	Or(&s.Prefix, DefaultPrefix)
	Or(&s.MaxFrame, DefaultMaxFrame)
	return nil
}

// Or sets *v to def if *v is its type's zero value: an option left unset.
func Or[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
