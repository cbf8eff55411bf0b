// Package codec holds redmap's wire formats: the task envelope a manager stores
// in Redis, the result a worker pushes back, and the frames of elements inside
// them. Everything is MessagePack (github.com/vmihailenco/msgpack/v5).
//
// Every decoder here reads bytes that came from Redis, which anyone with access
// to the server could have written, so each one checks the frame against a size
// cap before it decodes, never trusts a length prefix further than the bytes
// that follow it, and returns an error (never panics) on malformed input.
//
// What it exports, and for whom: it is the contract between managers and
// workers, and what a second implementation of either side (another
// language's worker, say) reads and writes. Task and Result are the two
// envelopes (EncodeTask, DecodeTask, EncodeResult, DecodeResult), with
// Failure and its Kind; an element frame is written by EncodeElements (a
// manager's inputs) or EncodeOutputs and an OutputEncoder (a worker's
// outputs, nil for a failed element) and read by DecodeElements; a batch's
// constant is one value (EncodeValue, DecodeValue). ErrTooLarge, SizeError,
// ErrCorrupt and ElementError say what was wrong with a frame, and
// DefaultMaxFrame is the cap both sides apply by default. Users of redmap's
// manager and worker never need this package.
//
// It is versioned with the module, as the contract between managers and
// workers of different builds: a change to a frame's layout
// comes with a minor version before 1.0 and a major one after, as CHANGELOG
// says, so a fleet is upgraded knowingly, never into silent misreads.
package codec

import (
	"errors"
	"fmt"
)

// DefaultMaxFrame is the default cap, in bytes, on any frame read from Redis:
// a task envelope or a result.
const DefaultMaxFrame = 256 << 20

// ErrTooLarge is returned for a frame or element above its size cap.
var ErrTooLarge = errors.New("codec: too large")

// ErrCorrupt is returned for bytes that are not a well-formed frame.
var ErrCorrupt = errors.New("codec: corrupt frame")

// SizeError reports a frame or an element larger than its cap. It matches
// ErrTooLarge with errors.Is.
type SizeError struct {
	What  string // "task", "result", "element 41"
	Size  int
	Limit int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("codec: %s is %d bytes, above the limit of %d", e.What, e.Size, e.Limit)
}

// Is reports whether target is ErrTooLarge.
func (e *SizeError) Is(target error) bool { return target == ErrTooLarge }

func checkSize(what string, b []byte, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxFrame
	}
	if len(b) > limit {
		return &SizeError{What: what, Size: len(b), Limit: limit}
	}
	return nil
}

func corrupt(what string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	return fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
}
