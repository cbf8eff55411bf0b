package redmap

// Idempotent declares a function free of side effects, or one whose side
// effects may happen twice (an upsert by key, a file written whole under
// its content's name): an option of Func, FuncWith and Emit. Its batches
// then get backup tasks by default: near a batch's end, a task running
// far longer than the batch's typical task is run again on another worker,
// the first result wins and the other is discarded, so that one slow
// machine does not set the batch's pace (see docs/programming.md,
// "Stragglers"). A call may turn them on or off (manager.Backups).
func Idempotent() Option { return idempotent{} }

type idempotent struct{}

func (idempotent) apply(o *handleOptions) { o.idempotent = true }

// Idempotent reports whether the function was declared Idempotent: its
// batches get backup tasks unless a call says otherwise.
func (h *Handle[In, Out]) Idempotent() bool { return h.opts.idempotent }

// Idempotent reports whether the function was declared Idempotent; see
// Handle.Idempotent.
func (h *HandleWith[C, In, Out]) Idempotent() bool { return h.opts.idempotent }

// Idempotent reports whether the emitter was declared Idempotent; see
// Handle.Idempotent.
func (e *Emitter[In, K, V]) Idempotent() bool { return e.opts.idempotent }
