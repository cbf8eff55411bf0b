// Package failure turns what a worker reports of a failed element into the
// error a redmap.TaskError carries.
package failure

import (
	"fmt"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
)

// causes maps each kind of failure a worker reports to its sentinel.
var causes = map[codec.Kind]error{
	codec.KindPanic:        redmap.ErrPanic,
	codec.KindUnknownFunc:  redmap.ErrUnknownFunc,
	codec.KindTypeMismatch: redmap.ErrTypeMismatch,
	codec.KindDecode:       redmap.ErrDecode,
	codec.KindEncode:       redmap.ErrEncode,
	codec.KindTooLarge:     redmap.ErrTooLarge,
	codec.KindConstMissing: redmap.ErrConstantMissing,
	codec.KindConstCorrupt: redmap.ErrConstantCorrupt,
	codec.KindLost:         redmap.ErrLost,
	codec.KindTimeout:      redmap.ErrTimeout,
	codec.KindReduce:       redmap.ErrReduce,
	codec.KindThrottled:    redmap.ErrThrottled,
	codec.KindRedisFull:    redmap.ErrRedisFull,
}

// Cause turns a worker's report of a failure into the error a TaskError
// carries: the function's own error as a *redmap.RemoteError, or the
// sentinel for its kind with the worker's message.
func Cause(f codec.Failure) error {
	if f.Kind == codec.KindError {
		return &redmap.RemoteError{Msg: f.Msg}
	}
	sentinel, ok := causes[f.Kind]
	if !ok {
		sentinel = redmap.ErrDecode
	}
	if f.Msg == "" {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, f.Msg)
}
