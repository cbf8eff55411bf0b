package redisbroker

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/id"
)

// The prelude's manager() and size_of() parse task ids with plain finds,
// which cost Redis less than the patterns they replaced: on every id, well
// formed or crafted, they say what those patterns said, and manager()'s
// memo of the last manager never answers for an id of another.
func TestPreludeParsesIdsAsPatterns(t *testing.T) {
	f := setup(t)
	mid := id.New()
	ids := []string{
		id.TaskIn(mid, 0, 1, 1, 0, 0), id.TaskIn(mid, 36, 7, 1000, 2, 0), id.TaskIn(mid, 5, 3, 65536, 0, 0),
		id.Task(mid, 42), id.TaskAt(mid, 42, 3, 0), id.TaskIn(id.Durable("x"), 9, 1, 12, 0, 0),
		"", "-", "a-", "-1,2.3", "a-,2.3", "a-1,.3", "a-1,2", "a-1,2.", "a-1.2,3.4", "a-1~2,3.4", "a-1,2~3.4",
		"a-1,z.3", "a-1,-2.3", "a-1, 2.3", "a-1,2 .3", "a-1,+2.3", "a-1,2,3.4", "a--1,2.3", "ab-1,2.3~4", "a-b-1,2.3",
		"a-1,zzzzzzzzzzzzzzzzzzzz.3", "a-1,2.3", "ab-1,2.3", "b-1,2.3",
	}
	// And random ids of the characters that matter, in runs where one
	// manager's ids follow each other, as in a call.
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab1z-,.~ %"
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		ids = append(ids, b.String())
	}
	body := `
local out = {}
for i = 1, #ARGV do
  local tid = ARGV[i]
  local mid = string.match(tid, '^([^-]+)-')
  local n = string.match(tid, '^[^-]+-[^,.~]+,(%w+)%.')
  local want_m, want_n = mid and ('b:m:' .. mid) or '', n and tonumber(n, 36) or 0
  local got_m, got_n = manager('b:', tid) or '', size_of(tid)
  if got_m ~= want_m or got_n ~= want_n then
    out[#out + 1] = tid .. ' => ' .. got_m .. ' ' .. tostring(got_n) .. ', want ' .. want_m .. ' ' .. tostring(want_n)
  end
end
out[#out + 1] = 'checked ' .. #ARGV
return out`
	script := preludeFor(body) + body
	args := make([]any, len(ids))
	for i, s := range ids {
		args[i] = s
	}
	out, err := f.c.Eval(t.Context(), script, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || out[len(out)-1] != "checked "+strconv.Itoa(len(ids)) {
		t.Fatalf("script did not check every id: %q", out)
	}
	for _, o := range out[:len(out)-1] {
		t.Error(o)
	}
	// id.Size, with which a submit counts its tasks' elements for the
	// scripts, reads the same count as size_of, which the scripts that move
	// tasks out of a lane count them by: else a lane's count drifts.
	sizes := `
local out = {}
for i = 1, #ARGV do
  out[i] = tostring(size_of(ARGV[i]))
end
return out`
	got, err := f.c.Eval(t.Context(), preludeFor(sizes)+sizes, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i, tid := range ids {
		lua, err := strconv.ParseFloat(got[i], 64)
		if err != nil || lua > math.MaxInt32 {
			continue // a count no manager makes (ids carry at most a chunk's)
		}
		checked++
		if n := id.Size(tid); float64(n) != lua {
			t.Errorf("id.Size(%q) = %d, size_of says %s", tid, n, got[i])
		}
	}
	if checked < len(ids)/2 {
		t.Fatalf("compared id.Size on %d ids of %d", checked, len(ids))
	}
}
