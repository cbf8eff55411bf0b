package wire

import (
	"errors"
	"fmt"
	"math"
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
	// Pipe is set on a pipeline's tasks (manager.From): the steps they
	// run besides the phase.
	Pipe *Pipe `msgpack:"q,omitempty"`
}

// EncodeShuffle returns the wire form of s.
func EncodeShuffle(s *Shuffle) ([]byte, error) { return codec.EncodeValue(s) }

// DecodeShuffle parses and checks a task's Shuffle.
func DecodeShuffle(b []byte) (*Shuffle, error) {
	s, err := codec.DecodeValue[Shuffle](b)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// check refuses a Shuffle no manager sends.
func (s *Shuffle) check() error {
	switch {
	case s.Job == "" || len(s.Job) > 64:
		return errors.New("shuffle: bad job id")
	case s.Parts < 1 || s.Parts > MaxPartitions:
		return fmt.Errorf("shuffle: %d partitions, want 1 to %d", s.Parts, MaxPartitions)
	case len(s.Salts) != 0 && len(s.Salts) != s.Parts:
		return fmt.Errorf("shuffle: %d salts for %d partitions", len(s.Salts), s.Parts)
	case s.Phase != PhaseMap && s.Phase != PhaseReduce && s.Phase != PhaseChain:
		return fmt.Errorf("shuffle: unknown phase %d", s.Phase)
	case s.Phase == PhaseChain && s.Pipe == nil:
		return errors.New("shuffle: a chain phase without its steps")
	case s.Base < 0 || s.TTL <= 0 || s.Page < 0:
		return errors.New("shuffle: base, ttl or page out of range")
	}
	for _, salt := range s.Salts {
		if salt < 0 {
			return errors.New("shuffle: negative salt")
		}
	}
	if s.Pipe != nil {
		return s.Pipe.check(s.Phase)
	}
	return nil
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
	// Fails are a pipeline's elements that failed in the task (a
	// pipeline's map tasks report every failed element here).
	Fails []StepFail `msgpack:"f,omitempty"`
}

// StepFails are the pipeline's elements that failed in the task.
func (s MapSummary) StepFails() []StepFail { return s.Fails }

// ReduceInput is the element of a reduce task: the partition to fold, and
// the ranges whose partials it must find there, as runs (CompressRanges).
type ReduceInput struct {
	Part int   `msgpack:"p"`
	Runs []int `msgpack:"r"`
}

// MaxRanges caps the ranges a reduce task reads: the map tasks of one call.
const MaxRanges = 1 << 22

// CompressRanges writes a list of ranges (start, count, ...) sorted by
// start as runs (start, count, times, ...): times ranges of count elements
// each, one after the other from start. A call's map tasks tile its input
// in a few sizes, so a reduce task's input is a few numbers, not two a map
// task.
func CompressRanges(rs []int) []int {
	var runs []int
	for i := 0; i+1 < len(rs); i += 2 {
		start, count := rs[i], rs[i+1]
		if n := len(runs); n > 0 {
			s, c, t := runs[n-3], runs[n-2], runs[n-1]
			if c == count && s+c*t == start {
				runs[n-1]++
				continue
			}
		}
		runs = append(runs, start, count, 1)
	}
	return runs
}

// ExpandRanges is the inverse of CompressRanges. It refuses runs that are
// not triples, that are out of range, or that expand past MaxRanges ranges.
func ExpandRanges(runs []int) ([]int, error) {
	if len(runs)%3 != 0 {
		return nil, fmt.Errorf("ranges: %d numbers, not triples", len(runs))
	}
	total := 0
	for i := 0; i < len(runs); i += 3 {
		start, count, times := runs[i], runs[i+1], runs[i+2]
		if start < 0 || count < 1 || times < 1 || times > MaxRanges-total || count > (math.MaxInt-start)/times {
			return nil, fmt.Errorf("ranges: run %d (%d, %d, %d) out of range", i/3, start, count, times)
		}
		total += times
	}
	rs := make([]int, 0, 2*total)
	for i := 0; i < len(runs); i += 3 {
		for k := range runs[i+2] {
			rs = append(rs, runs[i]+k*runs[i+1], runs[i+1])
		}
	}
	return rs, nil
}

// ReduceOutput is what a reduce task returns for its partition: the keys
// and pages of its output, stored in the partition's output list; or, if
// some partials were not in Redis (lost with their data), the indexes of
// those missing among the ranges of ReduceInput.Runs, expanded, and no
// output.
type ReduceOutput struct {
	Keys    int   `msgpack:"k"`
	Pages   int   `msgpack:"n"`
	Bytes   int64 `msgpack:"b"`
	Missing []int `msgpack:"m,omitempty"`
	// In a pipeline: Fails are the elements that failed in the steps
	// after the fold; Next says the partition's partials of the next
	// by-key step are stored (under Range(p, 1)), Keys and Bytes then
	// being theirs.
	Fails []StepFail `msgpack:"f,omitempty"`
	Next  bool       `msgpack:"x,omitempty"`
}

// StepFails are the pipeline's keys that failed in the partition's steps.
func (o ReduceOutput) StepFails() []StepFail { return o.Fails }
