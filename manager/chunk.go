package manager

// Automatic chunking: tiny elements travel many to a task, so that a million
// of them do not cost a million round trips, while slow ones travel few to a
// task, so that a batch still spreads over the fleet. The size aims at
// chunkTarget of work per task, from what workers measure.
const (
	chunkTarget  = 2e6 // ns of work per task to aim at
	chunkMax     = 8192
	chunkUnknown = 8 // elements per task while a function's cost is unknown
)

// chunkSize returns how many elements of fn to put in the next task of a
// batch of n elements.
func (m *Manager) chunkSize(fn string, n int) int {
	m.costMu.Lock()
	cost, known := m.costs[fn]
	m.costMu.Unlock()
	if !known {
		// Small first tasks measure the cost soon; a small batch is spread.
		return min(max(n/64, 1), chunkUnknown)
	}
	size := int(chunkTarget / max(cost, 1))
	// Keep at least 16 tasks in a batch that has the elements for them.
	return max(1, min(size, chunkMax, (n+15)/16))
}

// observe records that a task of fn ran count elements in nanos.
func (m *Manager) observe(fn string, nanos int64, count int) {
	if nanos <= 0 || count <= 0 {
		return
	}
	per := float64(nanos) / float64(count)
	m.costMu.Lock()
	if old, ok := m.costs[fn]; ok {
		per = 0.8*old + 0.2*per
	}
	m.costs[fn] = per
	m.costMu.Unlock()
}
