package wire

import (
	"errors"
	"fmt"
	"slices"

	"github.com/redmap/redmap/codec"
)

// PipelineRecord is what a durable pipeline (manager.From with
// manager.Durable) has done, as its holder last wrote it (keys.Pipeline):
// its fingerprint, and what each phase that ended gave, so that the call
// that takes the pipeline over runs none of those again. Fields are by
// name, so that an older reader skips what it does not know.
type PipelineRecord struct {
	// Sum is the pipeline's fingerprint: its steps' names and signatures,
	// its input's sum and length, its partitions. A call whose sum
	// differs is another pipeline, refused.
	Sum string `msgpack:"sum"`
	// Head says the head phase (the steps up to the first by-key step's
	// emitter) ended; Fails and Errs are then its failed elements and the
	// failures of its tasks.
	Head   bool        `msgpack:"head,omitempty"`
	Fails  []StepFail  `msgpack:"fails,omitempty"`
	Errs   []PipeError `msgpack:"errs,omitempty"`
	Levels []PipeLevel `msgpack:"levels"`
}

// PipeLevel is a by-key step of a durable pipeline: where its partitions
// are, what stored partials there, and which of its partitions were
// reduced.
type PipeLevel struct {
	// Job and Partitions name its partitions' keys (keys.Partition, with
	// Salts), so that an operator's cancel of the pipeline, while no
	// manager holds it, deletes them.
	Job        string `msgpack:"job,omitempty"`
	Partitions int    `msgpack:"partitions,omitempty"`
	Salts      []int  `msgpack:"salts,omitempty"`
	// Ranges are the producers whose partials its partitions hold (start,
	// count, ...), as its reduce tasks read them.
	Ranges []int `msgpack:"ranges,omitempty"`
	// Rounds are the reduce batches begun, which name them; Running are
	// the partitions of the last one while it runs, which the call that
	// takes the pipeline over submits again, the same, to take it over.
	Rounds  int   `msgpack:"rounds,omitempty"`
	Running []int `msgpack:"running,omitempty"`
	// Parts are its partitions reduced, or failed for good.
	Parts []PipePart `msgpack:"parts,omitempty"`
}

// PipePart is a partition of a by-key step that was reduced: what its
// reduce task gave, or why it failed.
type PipePart struct {
	Part   int          `msgpack:"p"`
	Out    ReduceOutput `msgpack:"o"`
	Failed *PipeError   `msgpack:"e,omitempty"`
}

// PipeError is a failure a durable pipeline keeps: an element's (Index,
// Stage, Func, ...) or a partition's (Msg alone). Kind is its cause's kind,
// as history records name it (FailedElement.Kind).
type PipeError struct {
	Index   int    `msgpack:"i"`
	Func    string `msgpack:"f,omitempty"`
	Stage   int    `msgpack:"s,omitempty"`
	Attempt int    `msgpack:"a,omitempty"`
	Key     string `msgpack:"k,omitempty"`
	Kind    string `msgpack:"c"`
	Msg     string `msgpack:"m"`
	Stack   string `msgpack:"x,omitempty"`
	Worker  string `msgpack:"w,omitempty"`
}

// EncodePipelineRecord encodes r.
func EncodePipelineRecord(r *PipelineRecord) ([]byte, error) { return codec.EncodeValue(r) }

// DecodePipelineRecord parses and checks a pipeline's record: bytes that
// are not one give an error, never a panic.
func DecodePipelineRecord(b []byte) (*PipelineRecord, error) {
	r, err := codec.DecodeValue[PipelineRecord](b)
	if err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// check refuses a record no manager writes.
func (r *PipelineRecord) check() error {
	if r.Sum == "" || len(r.Levels) > MaxSteps {
		return errors.New("pipeline record: no sum, or too many by-key steps")
	}
	for b, lv := range r.Levels {
		if err := lv.check(); err != nil {
			return fmt.Errorf("pipeline record: by-key step %d: %w", b, err)
		}
	}
	return nil
}

// check refuses a by-key step's record no manager writes.
func (lv *PipeLevel) check() error {
	if len(lv.Salts) > MaxPartitions || len(lv.Ranges)%2 != 0 || lv.Rounds < 0 || lv.Partitions < 0 || lv.Partitions > MaxPartitions ||
		len(lv.Salts) != 0 && lv.Partitions != 0 && len(lv.Salts) != lv.Partitions {
		return errors.New("bad partitions, salts, ranges or rounds")
	}
	if slices.ContainsFunc(lv.Ranges, func(x int) bool { return x < 0 }) {
		return errors.New("a negative range")
	}
	for _, p := range lv.Running {
		if p < 0 || p >= MaxPartitions {
			return fmt.Errorf("partition %d out of range", p)
		}
	}
	for _, p := range lv.Parts {
		if p.Part < 0 || p.Part >= MaxPartitions || p.Out.Pages < 0 {
			return fmt.Errorf("partition %d out of range", p.Part)
		}
	}
	return nil
}

// StageCounts is one stage of a pipeline over its batches that ended, as
// the history counted them when it wrote their records (keys.Stages). Its
// counts are in its batches' unit: a map stage's are the pipeline's
// elements, a reduce stage's (codec.CallInfo's Stage "... reduce") its
// partitions, with the keys that failed after the fold in FailedKeys
// (BatchRecord.FailedKeys). The JSON form is what a manager hands
// stages.lua to put back what Redis lost.
type StageCounts struct {
	Stage string `json:"stage"` // codec.CallInfo's Stage
	Func  string `json:"func"`  // the function of its last batch that ended
	// Batches ran its elements; Reruns ran some of them again (a
	// partition's producers after Redis lost what they stored), and count
	// nowhere else: Total, Done (elements with an outcome, failed ones
	// included), Failed and FailedKeys are of Batches.
	Batches    int    `json:"batches"`
	Reruns     int    `json:"reruns"`
	Total      int    `json:"total"`
	Done       int    `json:"done"`
	Failed     int    `json:"failed"`
	FailedKeys int    `json:"failed_keys"`
	Started    int64  `json:"started"` // Unix ms: its first batch's start
	Ended      int64  `json:"ended"`   // Unix ms: its last one's end
	Outcome    string `json:"outcome"` // its last batch's
}

// Add counts r, the record of a batch of the stage, in s as the history
// does (prelude.lua's write_histories): a rerun among Reruns only; its
// start, and its end with its outcome and function if it is the last.
func (s *StageCounts) Add(r *BatchRecord) {
	if r.Call.Rerun {
		s.Reruns++
	} else {
		s.Batches++
		s.Total += r.Total
		s.Done += r.Done
		s.Failed += r.Failed
		s.FailedKeys += r.FailedKeys
	}
	if r.Started > 0 && (s.Started == 0 || r.Started < s.Started) {
		s.Started = r.Started
	}
	if r.Ended >= s.Ended {
		s.Ended, s.Outcome, s.Func = r.Ended, r.Outcome, r.Func
	}
}
