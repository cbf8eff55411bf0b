package worker

import (
	"sync"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/wire"
)

// maxPendingGroups caps the failure groups a worker keeps between
// heartbeats; the failures of a group past it are counted in the group
// rdb.OtherGroup of their function and kind, never dropped.
const maxPendingGroups = 200

// failureLog counts failed elements by group (function, kind and the
// message's fingerprint) until the maintainer adds them to the queue's
// groups in Redis, off the hot path. Every failure is counted.
type failureLog struct {
	mu     sync.Mutex
	groups map[string]*wire.FailureGroup // by wire.FailureGroup.Key
}

// note counts the failed elements fails of task tid (function fn); a run
// counts each element it stands for.
func (l *failureLog) note(fn, tid string, fails []codec.Failure) {
	now := time.Now().UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.groups == nil {
		l.groups = make(map[string]*wire.FailureGroup)
	}
	// Fingerprinting a message costs microseconds (regular expressions);
	// the elements of one task often fail with the same one.
	lastMsg, lastPrint := "", ""
	for _, f := range fails {
		if f.Msg != lastMsg || lastPrint == "" {
			lastMsg, lastPrint = f.Msg, wire.Fingerprint(f.Msg)
		}
		g := wire.FailureGroup{Func: fn, Kind: f.Kind.String(), Fingerprint: lastPrint}
		cur := l.groups[g.Key()]
		if cur == nil && len(l.groups) >= maxPendingGroups {
			g.Fingerprint = wire.OtherGroup
			cur = l.groups[g.Key()]
		}
		if cur == nil {
			g.First = now
			cur = &g
			l.groups[g.Key()] = cur
		}
		cur.Count += int64(f.Last() - f.Index + 1)
		cur.Last, cur.Sample, cur.Task = now, f.Msg, tid
		if f.Stack != "" {
			cur.Stack = f.Stack
		}
	}
}

// take returns the groups counted since the last take, and forgets them.
func (l *failureLog) take() []wire.FailureGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]wire.FailureGroup, 0, len(l.groups))
	for _, g := range l.groups {
		out = append(out, *g)
	}
	l.groups = nil
	return out
}

// putBack counts again groups whose write failed, so the next one carries
// them.
func (l *failureLog) putBack(gs []wire.FailureGroup) {
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
