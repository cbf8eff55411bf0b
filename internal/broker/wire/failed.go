package wire

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
	Index    int    `json:"index"`            // in the batch's input
	Kind     string `json:"kind"`             // as the history counts it: "error", "panic", "lost", ...
	Error    string `json:"error"`            // its message, at most MaxFailedError bytes
	Attempts int    `json:"attempts"`         // the runs of its task the failure came from (the failed attempt + 1)
	Worker   string `json:"worker,omitempty"` // the worker whose attempt failed; "" on the manager's side
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
