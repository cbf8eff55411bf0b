package manager

import "iter"

// input is a batch's elements as the feeder reads them: a slice, whose
// length is known, or a sequence, pulled as the window has room.
type input interface {
	// next makes elements [pos, pos+n) ready to encode, fewer at the end
	// of the input, and returns their end (pos if there are none).
	next(pos, n int) int
	// encode returns the task payload of elements [start, end), made ready
	// by next.
	encode(start, end int) ([]byte, error)
	// submitted says the elements before pos are in Redis: a sequence
	// forgets them (the batch keeps their payload to resubmit).
	submitted(pos int)
	// length returns the number of elements, once known.
	length() (n int, known bool)
	// reencodes says whether encode works again for submitted elements;
	// if not, the batch keeps each chunk's payload while it is out.
	reencodes() bool
	// stop releases the input; the feeder calls it once it has read all it
	// will.
	stop()
}

// encoder encodes elements of a batch starting at index start into a task.
type encoder[In any] func(xs []In, start int) ([]byte, error)

// sliceInput is a slice of elements: Map, Submit.
type sliceInput[In any] struct {
	xs  []In
	enc encoder[In]
}

func (s *sliceInput[In]) next(pos, n int) int { return min(pos+n, len(s.xs)) }
func (s *sliceInput[In]) encode(start, end int) ([]byte, error) {
	return s.enc(s.xs[start:end], start)
}
func (s *sliceInput[In]) submitted(int)       {}
func (s *sliceInput[In]) length() (int, bool) { return len(s.xs), true }
func (s *sliceInput[In]) reencodes() bool     { return true }
func (s *sliceInput[In]) stop()               {}

// seqInput is a sequence of elements of unknown length (SubmitSeq): it holds
// only the elements pulled and not yet submitted.
type seqInput[In any] struct {
	pull     func() (In, bool)
	stopPull func()
	buf      []In // elements [base, base+len(buf))
	base     int
	ended    bool
	enc      encoder[In]
}

func newSeqInput[In any](seq iter.Seq[In], enc encoder[In]) *seqInput[In] {
	pull, stop := iter.Pull(seq)
	return &seqInput[In]{pull: pull, stopPull: stop, enc: enc}
}

func (s *seqInput[In]) next(pos, n int) int {
	for !s.ended && s.base+len(s.buf) < pos+n {
		x, ok := s.pull()
		if !ok {
			s.ended = true
			break
		}
		s.buf = append(s.buf, x)
	}
	return min(pos+n, s.base+len(s.buf))
}

func (s *seqInput[In]) encode(start, end int) ([]byte, error) {
	return s.enc(s.buf[start-s.base:end-s.base], start)
}

func (s *seqInput[In]) submitted(pos int) {
	if pos <= s.base {
		return
	}
	// Copy what is left, so the dropped elements are not kept alive by
	// the array behind buf.
	rest := s.buf[pos-s.base:]
	s.buf = append(make([]In, 0, max(len(rest), 64)), rest...)
	s.base = pos
}

func (s *seqInput[In]) length() (int, bool) { return s.base + len(s.buf), s.ended }
func (s *seqInput[In]) reencodes() bool     { return false }
func (s *seqInput[In]) stop()               { s.stopPull() }
