package manager

import (
	"fmt"
	"strconv"
	"strings"
)

// A durable batch without ChunkSize is cut by its cost as any batch is: a
// few small tasks measure the cost while it is unknown, then the rest is
// cut to it. A call that takes the batch over must cut the same chunks (its
// tasks are known by their place and checked against their sums), and its
// own manager may have learnt another cost, or none; so the first call
// records how it cut, its cut plan, in the batch's sums (cutField) with
// every window that extends it, and a call that takes the batch over
// follows the plan as far as it goes, then extends it as the first would.
//
// A plan is blindTasks tasks of blind elements each (cut while the cost
// was unknown), then tasks of size elements (0: not chosen yet). Once
// chosen, the size is kept for the rest of the batch, at least a
// durableTasks-th of a slice's elements, so that a batch under 64 MiB
// still fits in one window.
type cutPlan struct {
	blind      int  // elements a task while the cost is unknown
	blindTasks int  // tasks cut blind
	size       int  // elements a task after them; 0 until chosen
	stream     bool // the input is a sequence, of unknown length
	cut        int  // tasks this call has cut
	changed    bool // extended since last recorded
}

// cutField is the field of a durable batch's sums that holds its cut plan.
const cutField = "_cut"

// newCutPlan returns the plan of a durable batch of n elements (stream: a
// sequence), as recorded in its sums (rec; "" if none), or a new one.
func newCutPlan(rec string, n int, stream bool) (*cutPlan, error) {
	p := &cutPlan{stream: stream, blind: min(max(n/64, 1), chunkUnknown)}
	if stream {
		p.blind = chunkUnknown
	}
	if rec == "" {
		return p, nil
	}
	parts := strings.Split(rec, ",")
	var vals [3]int
	ok := len(parts) == 3
	for i := 0; ok && i < 3; i++ {
		var err error
		vals[i], err = strconv.Atoi(parts[i])
		ok = err == nil && vals[i] >= 0
	}
	if !ok || vals[0] < 1 {
		return nil, fmt.Errorf("manager: its cut plan %q does not parse", rec)
	}
	p.blind, p.blindTasks, p.size = vals[0], vals[1], vals[2]
	return p, nil
}

// String is the plan as recorded.
func (p *cutPlan) String() string {
	return fmt.Sprintf("%d,%d,%d", p.blind, p.blindTasks, p.size)
}

// decided reports whether the plan's size for the rest is chosen: no task
// is cut blind any more.
func (p *cutPlan) decided() bool { return p.size > 0 }

// next returns the elements of the call's next task of a batch of n
// elements sized by s, extending the plan past what was recorded: blind
// while c has no cost of s, else at the size chosen once.
func (p *cutPlan) next(c *costs, s sizing, n int) int {
	i := p.cut
	p.cut++
	switch {
	case i < p.blindTasks:
		return p.blind
	case p.size > 0:
		return p.size
	case s.key != "" && !c.known(s):
		p.blindTasks++
		p.changed = true
		return p.blind
	}
	p.size = c.chunkSize(s, n)
	if !p.stream {
		p.size = max(p.size, durableChunk(n))
	}
	p.changed = true
	return p.size
}
