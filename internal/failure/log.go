package failure

import (
	"sync"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
)

// maxPendingGroups caps the failure groups a Log keeps between writes;
// the failures of a group past it are counted in the group wire.OtherGroup
// of their function and kind, never dropped.
const maxPendingGroups = 200

// Log counts failed elements by group (function, kind and the message's
// fingerprint) until its owner adds them to the queue's groups in Redis
// (the failure groups redmap failures lists), off the hot path. Every
// failure is counted. A worker notes what its tasks' functions failed
// with; a manager, what failed on its side (no worker, lost, Redis
// unavailable, ...). The zero Log is ready.
type Log struct {
	mu     sync.Mutex
	groups map[string]*wire.FailureGroup // by wire.FailureGroup.Key
	// The last message NoteKind fingerprinted, and its fingerprint: a
	// manager failing a batch for one reason notes the same message for
	// each of its tasks, and a fingerprint costs microseconds (tens under
	// -race): 10,000 tasks failed for want of a worker spent a second on it.
	lastMsg, lastPrint string
}

// Note counts the failed elements fails of task tid (function fn); a run
// counts each element it stands for.
func (l *Log) Note(fn, tid string, fails []codec.Failure) {
	// Fingerprinting a message costs microseconds (regular expressions);
	// the elements of one task often fail with the same one.
	lastMsg, lastPrint := "", ""
	for _, f := range fails {
		if f.Msg != lastMsg || lastPrint == "" {
			lastMsg, lastPrint = f.Msg, wire.Fingerprint(f.Msg)
		}
		l.add(wire.FailureGroup{Func: fn, Kind: f.Kind.String(), Fingerprint: lastPrint, Sample: f.Msg, Task: tid, Stack: f.Stack},
			int64(f.Last()-f.Index+1))
	}
}

// NoteKind counts n elements of task tid (function fn) failed with kind
// and message msg: what a manager notes of a failure on its side.
func (l *Log) NoteKind(fn, kind, tid, msg string, n int) {
	l.mu.Lock()
	fp := l.lastPrint
	if msg != l.lastMsg {
		fp = ""
	}
	l.mu.Unlock()
	if fp == "" {
		fp = wire.Fingerprint(msg)
		l.mu.Lock()
		l.lastMsg, l.lastPrint = msg, fp
		l.mu.Unlock()
	}
	l.add(wire.FailureGroup{Func: fn, Kind: kind, Fingerprint: fp, Sample: msg, Task: tid}, int64(n))
}

// add counts n failures of g's group, g its last sample.
func (l *Log) add(g wire.FailureGroup, n int64) {
	now := time.Now().UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.groups == nil {
		l.groups = make(map[string]*wire.FailureGroup)
	}
	cur := l.groups[g.Key()]
	if cur == nil && len(l.groups) >= maxPendingGroups {
		g.Fingerprint = wire.OtherGroup
		cur = l.groups[g.Key()]
	}
	if cur == nil {
		g.First, g.Count = now, 0
		cur = &g
		l.groups[g.Key()] = cur
	}
	cur.Count += n
	cur.Last, cur.Sample, cur.Task = now, g.Sample, g.Task
	if g.Stack != "" {
		cur.Stack = g.Stack
	}
}

// Take returns the groups counted since the last take, and forgets them.
func (l *Log) Take() []wire.FailureGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]wire.FailureGroup, 0, len(l.groups))
	for _, g := range l.groups {
		out = append(out, *g)
	}
	l.groups = nil
	return out
}

// PutBack counts again groups whose write failed, so the next one carries
// them.
func (l *Log) PutBack(gs []wire.FailureGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.groups == nil {
		l.groups = make(map[string]*wire.FailureGroup)
	}
	for _, g := range gs {
		cur := l.groups[g.Key()]
		if cur == nil {
			g := g
			l.groups[g.Key()] = &g
			continue
		}
		cur.Count += g.Count
		cur.First = min(cur.First, g.First)
		if cur.Stack == "" {
			cur.Stack = g.Stack
		}
	}
}
