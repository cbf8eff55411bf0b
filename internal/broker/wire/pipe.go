package wire

import (
	"errors"
	"fmt"
)

// The messages of a pipeline (manager.From). Its tasks are a map/reduce by
// key's (Shuffle) with a Pipe: the narrow steps a task runs besides its
// phase. A map task runs its steps on its elements before the emitter; a
// reduce task runs them on its partition's pairs after the fold, and then
// either the next by-key step's map side (Next: its partials stored under
// the partition's Range(p, 1)) or nothing (its outputs stored as the
// partition's output pages). A pipeline with no by-key step has one phase,
// PhaseChain: its tasks return their outputs (ChainOut).

// PhaseChain is the phase of a pipeline with no by-key step.
const PhaseChain = 3

// MaxSteps caps the steps of a pipeline.
const MaxSteps = 64

// Step is a step of a pipeline a task runs: its function's name and
// signature, and its number in the pipeline (from 1), which its failures
// carry.
type Step struct {
	Name  string `msgpack:"n"`
	Sig   string `msgpack:"s"`
	Stage int    `msgpack:"i"`
}

// Pipe is what a pipeline's task runs besides its phase.
type Pipe struct {
	Steps []Step `msgpack:"s,omitempty"`
	// Stage is the number of the by-key step whose map or reduce side
	// the task runs (0 in PhaseChain).
	Stage int `msgpack:"b,omitempty"`
	// Next is the by-key step a reduce task's steps feed; nil if their
	// outputs are the pipeline's.
	Next *Next `msgpack:"x,omitempty"`
}

// Next is the by-key step after a reduce task's steps: its emitter and
// reducer, and where its partitions are.
type Next struct {
	Emit    Step    `msgpack:"e"`
	Reduce  Step    `msgpack:"r"`
	Shuffle Shuffle `msgpack:"h"`
}

// check refuses a Pipe no manager sends.
func (p *Pipe) check(phase int) error {
	if len(p.Steps) > MaxSteps {
		return fmt.Errorf("pipe: %d steps, over %d", len(p.Steps), MaxSteps)
	}
	for _, s := range p.Steps {
		if s.Name == "" || s.Stage < 1 || s.Stage > MaxSteps {
			return errors.New("pipe: a step without a name or number")
		}
	}
	switch {
	case phase == PhaseChain && (len(p.Steps) == 0 || p.Next != nil):
		return errors.New("pipe: a chain without steps, or with a by-key step")
	case phase == PhaseMap && p.Next != nil:
		return errors.New("pipe: a map task with a next by-key step")
	case p.Next != nil && (p.Next.Emit.Name == "" || p.Next.Reduce.Name == "" || p.Next.Shuffle.Phase != PhaseMap):
		return errors.New("pipe: a next by-key step without its emitter, reducer or map phase")
	case p.Next != nil && p.Next.Shuffle.Pipe != nil:
		return errors.New("pipe: a next by-key step with steps of its own")
	}
	if p.Next != nil {
		return p.Next.Shuffle.check()
	}
	return nil
}

// StepFail is an element of a pipeline that failed in a step: the step's
// number, the index in the pipeline's input of the element it came from
// (-1 past a by-key step), or the key it came from past one, and why.
type StepFail struct {
	Stage int `msgpack:"s"`
	Index int `msgpack:"i"`
	// Through, if greater than Index, is the last of a run of elements
	// that failed alike (an input frame unreadable from Index on).
	Through int    `msgpack:"t,omitempty"`
	Key     string `msgpack:"k,omitempty"`
	Kind    int    `msgpack:"c"`
	Msg     string `msgpack:"m"`
	Stack   string `msgpack:"x,omitempty"`
}

// ChainOut is what a task of PhaseChain returns: the index in the
// pipeline's input of its first element, its outputs as one page, and its
// failed elements.
type ChainOut struct {
	Start int        `msgpack:"a"`
	N     int        `msgpack:"n"`
	Page  []byte     `msgpack:"p"`
	Fails []StepFail `msgpack:"f,omitempty"`
	// Rest are the other tasks' ChainOuts, as the manager folds them; it
	// never travels.
	Rest []ChainOut `msgpack:"-"`
}

// StepFails are the pipeline's elements that failed in the task.
func (o ChainOut) StepFails() []StepFail { return o.Fails }
