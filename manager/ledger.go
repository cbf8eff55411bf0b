package manager

import "time"

// ledger is a batch's feed as it stands: the chunks submitted so far, which
// the feeder appends and closeChunk settles, how many elements still wait
// for an outcome, and the in-flight window the feeder keeps under its
// bounds. Its batch's mu guards it.
type ledger struct {
	n         int     // elements: all of a slice; of a sequence, those read so far
	left      int     // elements without an outcome yet
	exhausted bool    // every element of the input has its chunk
	cut       error   // why the feeder stopped reading a sequence early, if it did
	chunks    []chunk // the tasks submitted so far
	stream    bool    // the input is a sequence: its elements count as they are read
	// bounded: a stream of outputs (not folded), whose elements in flight
	// and results not yet read are held under maxUnread together.
	bounded bool

	// The in-flight window: tasks and payload bytes submitted and not yet
	// delivered. The feeder submits more only while both are under the
	// manager's bounds.
	inflight, inflightBytes int
	// A stream's elements in flight, and its results not yet read.
	inflightElems, unread int
}

// chunk is one task of a batch: count elements from start, size bytes of
// payload. A chunk with no task id holds elements that were never submitted
// (one that could not be encoded, or the rest of a batch Redis did not take).
// over is set once, by closeChunk, when the chunk's elements have their
// outcome.
type chunk struct {
	start, count, size int
	tid                string
	over               bool
	payload            []byte // kept while out if the input cannot encode it again
	// began is when its task began to run at the latest: its result's
	// arrival less its run (backup.go); zero until it has a result.
	began time.Time
}

// add appends chunks, counting them in flight, and returns the index of
// the first.
func (l *ledger) add(cs ...chunk) int {
	first := len(l.chunks)
	l.chunks = append(l.chunks, cs...)
	l.inflight += len(cs)
	for _, c := range cs {
		l.inflightBytes += c.size
		l.inflightElems += c.count
		if l.stream { // a stream's elements count as they are read
			l.n += c.count
			l.left += c.count
		}
	}
	return first
}

// settle counts chunk c over: its elements have their outcome and it is
// out of flight; a stream's results wait to be read.
func (l *ledger) settle(c chunk) {
	l.left -= c.count
	l.inflight--
	l.inflightBytes -= c.size
	l.inflightElems -= c.count
	if l.stream {
		l.unread += c.count
	}
}

// ended reports whether every element has its outcome.
func (l *ledger) ended() bool { return l.left == 0 && l.exhausted }

// open returns the chunks not over yet, and the ids of those submitted.
func (l *ledger) open() (cis []int, tids []string) {
	for ci, c := range l.chunks {
		if !c.over {
			cis = append(cis, ci)
			if c.tid != "" {
				tids = append(tids, c.tid)
			}
		}
	}
	return cis, tids
}

// window returns what is in flight: tasks, payload bytes, and elements out
// and unread with the most of them allowed (no bound but a stream's).
func (l *ledger) window() (tasks, bytes, elems, maxElems int) {
	maxElems = -1
	if l.bounded {
		maxElems = maxUnread
	}
	return l.inflight, l.inflightBytes, l.inflightElems + l.unread, maxElems
}

// room reports whether the window has drained to half its bounds, when the
// feeder submits again.
func (l *ledger) room() bool {
	return l.inflight <= windowTasks/2 && l.inflightBytes <= windowBytes/2 &&
		(!l.bounded || l.inflightElems+l.unread <= maxUnread/2)
}

// read counts n of a stream's results read, and reports whether that made
// room for the feeder (its elements out and unread fell to half the bound).
func (l *ledger) read(n int) bool {
	before := l.inflightElems + l.unread
	l.unread -= n
	return before > maxUnread/2 && before-n <= maxUnread/2
}
