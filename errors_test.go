package redmap_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redmap/redmap"
)

// failed is a BatchError of total elements whose failures are given as
// runs: n elements in a row, from index from, failing with err.
func failed(total int, runs ...run) *redmap.BatchError {
	be := &redmap.BatchError{Total: total}
	for _, r := range runs {
		for i := range r.n {
			be.Failed = append(be.Failed, &redmap.TaskError{Index: r.from + i, Func: "call", Err: r.err})
		}
	}
	return be
}

type run struct {
	from, n int
	err     error
}

// A BatchError says each cause once, with how many elements it failed and
// the first of them, the most frequent first.
func TestBatchErrorGroupsByCause(t *testing.T) {
	tooMany := &redmap.RemoteError{Msg: "429 from API"}
	long := &redmap.RemoteError{Msg: strings.Repeat("é", 200) + "\nsecond line"}
	for _, c := range []struct {
		name string
		be   *redmap.BatchError
		want string
	}{
		{"one", failed(10, run{7, 1, tooMany}),
			"redmap: 1 of 10 elements failed: element 7: 429 from API"},
		{"one cause", failed(300, run{0, 300, tooMany}),
			"redmap: 300 of 300 elements failed: 300 elements (0, 1, 2, ...): 429 from API"},
		{"mixed, the most frequent first", failed(500, run{0, 1, redmap.ErrTimeout}, run{1, 494, tooMany}, run{495, 2, redmap.ErrLost}),
			"redmap: 497 of 500 elements failed: 494 elements (1, 2, 3, ...): 429 from API; 2 elements (495, 496): task lost; element 0: task timed out"},
		{"messages that differ in a number, one cause", failed(5, run{0, 3, &redmap.RemoteError{Msg: "item 12: bad row"}}, run{3, 2, &redmap.RemoteError{Msg: "item 40: bad row"}}),
			"redmap: 5 of 5 elements failed: 5 elements (0, 1, 2, ...): messages like: item 12: bad row"},
		{"at most 4 causes", failed(6, run{0, 1, errors.New("a")}, run{1, 1, errors.New("b")}, run{2, 1, errors.New("c")},
			run{3, 1, errors.New("d")}, run{4, 1, errors.New("e")}, run{5, 1, errors.New("f")}),
			"redmap: 6 of 6 elements failed: element 0: a; element 1: b; element 2: c; element 3: d; and 2 more causes (2 elements)"},
		{"a long cause cut, on one line", failed(1, run{0, 1, long}),
			"redmap: 1 of 1 elements failed: element 0: " + strings.Repeat("é", 160) + "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.be.Error(); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// Grouping the message changes nothing of what errors.Is and errors.As find.
func TestBatchErrorUnwraps(t *testing.T) {
	err := fmt.Errorf("run: %w", failed(3, run{0, 2, redmap.ErrTimeout}, run{2, 1, &redmap.RemoteError{Msg: "no"}}))
	var re *redmap.RemoteError
	var te *redmap.TaskError
	if !errors.Is(err, redmap.ErrTimeout) || !errors.As(err, &re) || re.Msg != "no" || !errors.As(err, &te) || te.Index != 0 {
		t.Fatalf("errors.Is/As through %v: %v %v", err, re, te)
	}
}
