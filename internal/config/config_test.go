package config

import "testing"

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		in   Shared
		want string // error, or "" for none
	}{
		{Shared{}, "worker: Options.Queue is required"},
		{Shared{Queue: "a{b}"}, `worker: Options.Queue: queue name "a{b}" contains '{' or '}', which delimit its Cluster hash tag`},
		{Shared{Queue: "a#1"}, `worker: Options.Queue: queue name "a#1" contains '#', which names the shards of a queue`},
		{Shared{Queue: "a\nb"}, `worker: Options.Queue: queue name "a\nb" contains a character that does not print (U+000A)`},
		{Shared{Queue: "a*"}, ""}, // glob characters are escaped wherever a pattern is built
		{Shared{Queue: "q", MaxFrame: -1}, "worker: Options.MaxFrame -1 is negative"},
		{Shared{Queue: "q"}, ""},
	} {
		s := c.in
		err := s.Resolve("worker")
		switch {
		case err != nil && err.Error() != c.want, err == nil && c.want != "":
			t.Errorf("Resolve(%+v) = %v, want %q", c.in, err, c.want)
		case err == nil && (s.Prefix != DefaultPrefix || s.MaxFrame != DefaultMaxFrame):
			t.Errorf("defaults not filled: %+v", s)
		}
	}
	s := Shared{Queue: "q", Prefix: "p", MaxFrame: 10}
	if err := s.Resolve("manager"); err != nil || s.Prefix != "p" || s.MaxFrame != 10 {
		t.Errorf("set fields changed: %+v, %v", s, err)
	}
}
