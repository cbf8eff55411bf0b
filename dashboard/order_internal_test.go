package dashboard

import (
	"testing"
	"time"

	"github.com/redmap/redmap/inspect"
)

// Running batches come first, by queue; then the ended ones, the newest
// first whatever their queue (the page shows the first three as cards).
func TestOrderNewestEndedAcrossQueues(t *testing.T) {
	now := time.Now()
	st := State{Batches: []inspect.Batch{
		{Queue: "a", ID: "old", Ended: now.Add(-time.Hour)},
		{Queue: "z", ID: "running-z"},
		{Queue: "b", ID: "newest", Ended: now},
		{Queue: "a", ID: "running-a"},
		{Queue: "c", ID: "middle", Ended: now.Add(-time.Minute)},
	}}
	order(&st)
	var got []string
	for _, b := range st.Batches {
		got = append(got, b.ID)
	}
	want := []string{"running-a", "running-z", "newest", "middle", "old"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
