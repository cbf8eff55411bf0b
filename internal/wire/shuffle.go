package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/redmap/redmap/codec"
)

// The messages of a map/reduce by key (manager.ReduceByKey). Its map tasks
// and reduce tasks are tasks of the emitter, carrying a Shuffle
// (codec.Task.Shuffle) that says which phase and where its partitions live.
// Elements of a map task are the caller's; the element of a reduce task is
// a ReduceInput. Both give one output per task: a MapSummary, a ReduceOutput
// per element.

// Phases of a map/reduce by key.
const (
	PhaseMap    = 1
	PhaseReduce = 2
)

// MaxPartitions caps a map/reduce by key's partitions.
const MaxPartitions = 1 << 16

// Shuffle says what a task of a map/reduce by key does.
type Shuffle struct {
	Job   string `msgpack:"j"` // the call's id: its partitions' keys carry it
	Parts int    `msgpack:"p"` // partitions
	// Salts are, on a Cluster, the candidate index of each partition's key
	// name (keys.Partition) that puts it on the master the manager chose;
	// empty elsewhere (every salt 0).
	Salts []int `msgpack:"s,omitempty"`
	Phase int   `msgpack:"f"`
	// Base is the index in the call's input of the batch's first element:
	// a map task's partials are stored under the range of the call's
	// elements it ran (Range), whichever batch ran it.
	Base int   `msgpack:"b,omitempty"`
	TTL  int64 `msgpack:"t"`           // ms: the partitions' keys expire after it
	Page int   `msgpack:"g,omitempty"` // reduce: bytes per page of output
}

// EncodeShuffle returns the wire form of s.
func EncodeShuffle(s *Shuffle) ([]byte, error) { return codec.EncodeValue(s) }

// DecodeShuffle parses and checks a task's Shuffle.
func DecodeShuffle(b []byte) (*Shuffle, error) {
	s, err := codec.DecodeValue[Shuffle](b)
	switch {
	case err != nil:
		return nil, err
	case s.Job == "" || len(s.Job) > 64:
		return nil, errors.New("shuffle: bad job id")
	case s.Parts < 1 || s.Parts > MaxPartitions:
		return nil, fmt.Errorf("shuffle: %d partitions, want 1 to %d", s.Parts, MaxPartitions)
	case len(s.Salts) != 0 && len(s.Salts) != s.Parts:
		return nil, fmt.Errorf("shuffle: %d salts for %d partitions", len(s.Salts), s.Parts)
	case s.Phase != PhaseMap && s.Phase != PhaseReduce:
		return nil, fmt.Errorf("shuffle: unknown phase %d", s.Phase)
	case s.Base < 0 || s.TTL <= 0 || s.Page < 0:
		return nil, errors.New("shuffle: base, ttl or page out of range")
	}
	for _, salt := range s.Salts {
		if salt < 0 {
			return nil, errors.New("shuffle: negative salt")
		}
	}
	return &s, nil
}

// Salt returns partition p's salt.
func (s *Shuffle) Salt(p int) int {
	if len(s.Salts) == 0 {
		return 0
	}
	return s.Salts[p]
}

// Range is the field of a partition's hash holding the partial of the
// call's elements start to start+count-1.
func Range(start, count int) string {
	return strconv.Itoa(start) + ":" + strconv.Itoa(count)
}

// MapSummary is what a map task returns: the range of the call's elements
// it ran (its partials' field in each partition), the distinct keys and
// bytes of its partials. The manager folds the summaries of a phase
// (Ranges concatenated), so it learns every range whose partials it may
// count on.
type MapSummary struct {
	Ranges []int `msgpack:"r"` // start, count, start, count, ...
	Keys   int   `msgpack:"k"`
	Bytes  int64 `msgpack:"b"`
}

// ReduceInput is the element of a reduce task: the partition to fold, and
// the ranges (start, count, ...) whose partials it must find there.
type ReduceInput struct {
	Part   int   `msgpack:"p"`
	Ranges []int `msgpack:"r"`
}

// ReduceOutput is what a reduce task returns for its partition: the keys
// and pages of its output, stored in the partition's output list; or, if
// some partials were not in Redis (lost with their data), the indexes in
// ReduceInput.Ranges (of pairs) of those missing, and no output.
type ReduceOutput struct {
	Keys    int   `msgpack:"k"`
	Pages   int   `msgpack:"n"`
	Bytes   int64 `msgpack:"b"`
	Missing []int `msgpack:"m,omitempty"`
}
