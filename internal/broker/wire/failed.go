package wire

import "strconv"

// MaxFailedElements is how many failed elements of one batch are recorded
// for operators (keys.FailedElements); the others are counted, not listed.
const MaxFailedElements = 1000

// MaxFailedError is the most bytes of a failed element's error recorded.
const MaxFailedError = 512

// FailedOmittedField is the field of a batch's failed-elements hash that
// counts the failed elements left out past MaxFailedElements.
const FailedOmittedField = "omitted"

// FailedElement is one failed element of an ended batch, as operators
// browse it (redmap failures -batch, the dashboard): a field value of
// keys.FailedElements, by field names so that an old reader skips what
// it does not know.
type FailedElement struct {
	Index    int    `json:"index"`            // in the batch's input (a pipeline's step: in the pipeline's; -1 for a key)
	Kind     string `json:"kind"`             // as the history counts it: "error", "panic", "lost", ...
	Error    string `json:"error"`            // its message, at most MaxFailedError bytes
	Attempts int    `json:"attempts"`         // the runs of its task the failure came from (the failed attempt + 1)
	Worker   string `json:"worker,omitempty"` // the worker whose attempt failed; "" on the manager's side
	// Stage and Key are set for an element of a pipeline that failed in
	// a step: the step's number, and past a by-key step the key the
	// element came from (StepFail).
	Stage int    `json:"stage,omitempty"`
	Key   string `json:"key,omitempty"`
}

// Field is e's field in a failed-elements hash: its index, or "key " and
// its key for a key of a pipeline, which has no index.
func (e FailedElement) Field() string {
	if e.Index < 0 && e.Key != "" {
		return "key " + e.Key
	}
	return strconv.Itoa(e.Index)
}

// FailedElements is what a batch's failed-elements hash holds: the failed
// elements recorded, in index order, and how many more failed.
type FailedElements struct {
	Elements []FailedElement `json:"elements"`
	Omitted  int             `json:"omitted"`
}

// EncodeFailed returns e as a field value of a failed-elements hash, its
// error cut to MaxFailedError bytes.
func EncodeFailed(e FailedElement) string {
	e.Error = Cut(e.Error, MaxFailedError)
	return encodeJSON(e)
}

// DecodeFailed reads a field value of a failed-elements hash.
func DecodeFailed(s string) (FailedElement, error) {
	return decodeJSON[FailedElement](s, "failed element")
}
