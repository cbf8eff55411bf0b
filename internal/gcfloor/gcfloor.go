// Package gcfloor keeps the garbage collector of a process whose live heap
// is small from running every few megabytes allocated.
//
// Go starts a collection when the heap has grown by GOGC percent of what
// was live after the last one, and at least 4 MiB. A worker's live heap is
// often a few megabytes while it allocates a few kilobytes a task, so at
// the default it collects dozens of times a second, and each collection's
// fixed cost (its mark workers, stack scans, sweeping) adds up: in the
// bench's one-task-per-element scenario it was about a third of a worker
// process's CPU. While held, this package sets the collector's percent
// after each collection so that the next one comes after at least the
// headroom's worth of growth (live × percent/100 ≥ headroom), never below
// the percent the process had; a large live heap keeps that percent. (The
// runtime's 4 MiB floor scales with the percent, so a live heap under
// 4 MiB gets more growth than the headroom: Percent counts it as at least
// 1 MiB, which bounds the floor at 4 MiB × headroom / 1 MiB.)
//
// It leaves the collector alone when the environment sets GOGC or
// GOMEMLIMIT, when the program set a memory limit, and from the moment the
// program sets a percent of its own (debug.SetGCPercent): the operator's
// or the program's choice wins.
package gcfloor

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the percent set: with a live heap of a few hundred
// kilobytes the headroom alone would ask for more.
const maxPercent = 10000

var (
	mu    sync.Mutex
	holds = map[int64]int{} // headroom -> holders
	orig  int               // the percent before the first hold
	set   int               // the percent last set; 0 when not tuning
	gen   uint64            // bumped when tuning stops, to end the sentinel of a past one
)

// Hold keeps at least headroom bytes of heap growth between collections
// until release is called (the largest headroom of those held counts). It
// does nothing if headroom <= 0, or when the collector is the
// environment's or the program's to set (see the package comment).
func Hold(headroom int64) (release func()) {
	if headroom <= 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	mu.Lock()
	defer mu.Unlock()
	holds[headroom]++
	if set == 0 && len(holds) == 1 && holds[headroom] == 1 {
		gogc, limit := read()
		if gogc > 0 && limit == math.MaxInt64 {
			orig = gogc
			set = orig
			retune()
			gen++
			arm(gen)
		}
	}
	var once sync.Once
	return func() { once.Do(func() { unhold(headroom) }) }
}

func unhold(headroom int64) {
	mu.Lock()
	defer mu.Unlock()
	if holds[headroom]--; holds[headroom] == 0 {
		delete(holds, headroom)
	}
	if len(holds) > 0 || set == 0 {
		return
	}
	if gogc, _ := read(); gogc == set {
		debug.SetGCPercent(orig)
	}
	set = 0
	gen++
}

// read returns the collector's percent and memory limit.
func read() (gogc int, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// retune sets the percent for the live heap now; mu is held and tuning on.
func retune() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var headroom int64
	for h := range holds {
		headroom = max(headroom, h)
	}
	p := Percent(s[0].Value.Uint64(), uint64(headroom), orig)
	if p != set {
		debug.SetGCPercent(p)
		set = p
	}
}

// Percent returns the percent that leaves at least headroom bytes of growth
// over a live heap of live bytes, at least floor and at most maxPercent.
func Percent(live, headroom uint64, floor int) int {
	live = max(live, 1<<20) // before the first collection the metric is 0
	p := (headroom*100 + live - 1) / live
	return int(min(max(p, uint64(floor)), maxPercent))
}

// sentinel is garbage the collector finds in every cycle: its finalizer
// retunes, then arms the next. It is 16 bytes or more: the runtime packs
// smaller objects without pointers into shared blocks, and a finalizer on
// one may wait as long as its neighbours live.
type sentinel struct {
	gen uint64
	_   [8]byte
}

func arm(g uint64) {
	runtime.SetFinalizer(&sentinel{gen: g}, onCycle)
}

func onCycle(s *sentinel) {
	mu.Lock()
	defer mu.Unlock()
	if s.gen != gen || set == 0 {
		return // tuning stopped, or started again with a sentinel of its own
	}
	if gogc, limit := read(); gogc != set || limit != math.MaxInt64 {
		// The program set its own: leave the collector to it.
		set = 0
		gen++
		return
	}
	retune()
	arm(s.gen)
}
