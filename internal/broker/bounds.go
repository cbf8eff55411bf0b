package broker

// The bounds of one call, which callers size their calls by.
const (
	// CallBytes caps the bytes of payloads, results or constant parts that
	// one call carries, beyond one item larger than it, which goes alone: a
	// manager's submit group, read of staged results and upload pipeline; a
	// worker's finish, the payloads a take reads beside its script, a
	// constant's parts fetched. 1 MiB crosses a link of 10 MB/s in 0.1 s,
	// far inside go-redis's read and write timeouts (3 s by default), so a
	// slow link makes calls slower and never makes them time out above
	// about 350 KB/s; at maxmemory one call never holds more than it. On
	// loopback a round trip costs about what 100 KiB of bytes do, so the
	// cap adds about a tenth to the time of moving large values.
	CallBytes = 1 << 20
	// ScriptBudget is the most units of work one call of a script that
	// works in slices does (prelude.lua's BUDGET): a batch published or
	// recorded, a lane or a task withdrawn, a task purged or reaped, each a
	// few commands. Its caller calls again until the work is done, so no
	// call holds Redis for long (a few ms) whatever the sizes: publishing
	// 100,000 batches, recording them lost, purging 100,000 tasks, reaping
	// a dead worker's 100,000 private tasks.
	ScriptBudget = 500
	// Inline is the largest payload a take returns, or result a finish
	// takes, through its script (prelude.lua's INLINE): larger ones go out
	// and in with plain commands beside the script (a submit's payloads
	// always do). Redis copies a string into Lua and out again at about 1 ns
	// a byte: an EVAL that HSETs one argument costs 1.7 µs of Redis for 256
	// bytes, 3.1 µs for 2 KiB, 17 µs for 16 KiB, a plain HSET of it under
	// 0.3 µs plus its own call of a µs or two. Under 2 KiB the copy costs
	// about what the extra call (or, for a take, round trip) would.
	Inline = 2 << 10
	// MaxBackups is the most tasks one Backup call copies (backup.lua looks
	// for each one's holder among the live workers).
	MaxBackups = 8
)

// Within returns how many of the first items, whose sizes are given, one
// call carries: as many as fit in budget bytes (at most CallBytes), and at
// least one.
func Within(sizes []int, budget int) int {
	budget = min(budget, CallBytes)
	n, total := 0, 0
	for n < len(sizes) && (n == 0 || total+sizes[n] <= budget) {
		total += sizes[n]
		n++
	}
	return n
}

// Masters is a Cluster's map of slots to masters.
type Masters struct {
	// Slots are the ranges of slots, sorted by first slot, each with the
	// address of its master ("" if none).
	Slots []SlotRange
	// Addrs are the masters' addresses, in the order of their first slot.
	Addrs []string
}

// SlotRange is slots Start to End (inclusive), served by the master at
// Addr.
type SlotRange struct {
	Start, End int
	Addr       string
}

// Owner returns the address of the master serving slot, or "".
func (m Masters) Owner(slot int) string {
	for _, r := range m.Slots {
		if r.Start <= slot && slot <= r.End {
			return r.Addr
		}
	}
	return ""
}
