package worker

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redmap/redmap"
)

var square = redmap.Func("square", func(_ context.Context, x int) (int, error) { return x * x, nil })

// worker.Main's command line: -h prints the usage and succeeds; a stray
// argument, a bad flag or a malformed environment variable is one error,
// returned (printed by the caller alone), before anything connects.
func TestMainFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		env     string // NAME=value
		wantErr string // "" for success
		stdout  string
	}{
		{args: []string{"-h"}, stdout: "-concurrency"},
		{args: []string{"--help"}, stdout: "Usage:"},
		{args: []string{"-queue", "app", "oops-typo", "-concurrency", "8"}, wantErr: `unexpected argument "oops-typo"`},
		{args: []string{"-concurrency", "abc"}, wantErr: `invalid value "abc" for flag -concurrency`},
		{args: []string{"-nosuch"}, wantErr: "flag provided but not defined: -nosuch"},
		{env: "REDMAP_CONCURRENCY=eight", wantErr: `REDMAP_CONCURRENCY="eight": want an integer`},
	} {
		t.Run(strings.Join(c.args, " ")+c.env, func(t *testing.T) {
			if name, value, ok := strings.Cut(c.env, "="); ok {
				t.Setenv(name, value)
			}
			var stdout, stderr bytes.Buffer
			err := mainWith(c.args, &stdout, &stderr, square)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			case !strings.Contains(stdout.String(), c.stdout):
				t.Fatalf("stdout %q, want %q in it", stdout.String(), c.stdout)
			case stderr.Len() > 0:
				t.Fatalf("stderr %q: the error must be said once, by the caller", stderr.String())
			}
		})
	}
}
