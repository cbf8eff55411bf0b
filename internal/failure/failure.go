// Package failure turns what a worker reports of a failed element into the
// error a TaskError carries.
package failure

import (
	"fmt"

	"github.com/redmap/redmap/codec"
)

// causes maps each kind of failure a worker reports to its sentinel.
var causes = map[codec.Kind]error{
	codec.KindPanic:        ErrPanic,
	codec.KindUnknownFunc:  ErrUnknownFunc,
	codec.KindTypeMismatch: ErrTypeMismatch,
	codec.KindDecode:       ErrDecode,
	codec.KindEncode:       ErrEncode,
	codec.KindTooLarge:     ErrTooLarge,
	codec.KindConstMissing: ErrConstantMissing,
	codec.KindConstCorrupt: ErrConstantCorrupt,
	codec.KindLost:         ErrLost,
	codec.KindTimeout:      ErrTimeout,
	codec.KindReduce:       ErrReduce,
	codec.KindThrottled:    ErrThrottled,
	codec.KindRedisFull:    ErrRedisFull,
}

// Cause turns a worker's report of a failure into the error a TaskError
// carries: the function's own error as a *RemoteError, or the
// sentinel for its kind with the worker's message.
func Cause(f codec.Failure) error {
	if f.Kind == codec.KindError {
		return &RemoteError{Msg: f.Msg}
	}
	sentinel, ok := causes[f.Kind]
	if !ok {
		sentinel = ErrDecode
	}
	if f.Msg == "" {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, f.Msg)
}
