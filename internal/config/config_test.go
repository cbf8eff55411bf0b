package config

import "testing"

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		in   Shared
		want string // error, or "" for none
	}{
		{Shared{}, "worker: Options.Queue is required"},
		{Shared{Queue: "a{b}"}, `worker: Options.Queue "a{b}" contains '{' or '}'`},
		{Shared{Queue: "q", MaxFrame: -1}, "worker: Options.MaxFrame -1 is negative"},
		{Shared{Queue: "q"}, ""},
	} {
		s := c.in
		err := s.Resolve("worker")
		if got := ""; err != nil {
			got = err.Error()
			if got != c.want {
				t.Errorf("Resolve(%+v) = %q, want %q", c.in, got, c.want)
			}
			continue
		}
		if c.want != "" {
			t.Errorf("Resolve(%+v) = nil, want %q", c.in, c.want)
		}
		if s.Prefix != DefaultPrefix || s.MaxFrame != DefaultMaxFrame {
			t.Errorf("defaults not filled: %+v", s)
		}
	}
	s := Shared{Queue: "q", Prefix: "p", MaxFrame: 10}
	if err := s.Resolve("manager"); err != nil || s.Prefix != "p" || s.MaxFrame != 10 {
		t.Errorf("set fields changed: %+v, %v", s, err)
	}
}
