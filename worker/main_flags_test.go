package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
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
		{args: []string{"-h"}, stdout: "-prefetch"},
		{env: "REDMAP_PREFETCH=lots", wantErr: `REDMAP_PREFETCH="lots": want an integer`},
		{args: []string{"-prefetch", "-2"}, wantErr: "Options.Prefetch -2 is below -1"},
		{args: []string{"-h"}, stdout: "-max-abandoned"},
		{args: []string{"-abandon-grace", "0s"}, wantErr: `-abandon-grace "0s": want a positive duration`},
		{env: "REDMAP_ABANDON_GRACE=soon", wantErr: `-abandon-grace "soon"`},
		{args: []string{"-max-abandoned", "-2"}, wantErr: "Options.MaxAbandoned -2 is below -1"},
		// The default from REDIS_URL shows without its password (issue 35).
		{args: []string{"-h"}, env: "REDIS_URL=redis://u:TOP/SECRET@h:1/0", stdout: "(default redis://xxxxx@h:1/0)"},
		{args: []string{"-h"}, env: "REDIS_URL=redis://u:TOPSECRET@h:1/0", stdout: "(default redis://u:xxxxx@h:1/0)"},
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
			case strings.Contains(stdout.String(), "SECRET"):
				t.Fatalf("stdout shows the password: %q", stdout.String())
			case stderr.Len() > 0:
				t.Fatalf("stderr %q: the error must be said once, by the caller", stderr.String())
			}
		})
	}
}

// worker.Main ends with one clear error naming the address and the cause,
// having served nothing, when Redis is not there (after its start budget,
// with the last real error, not the deadline's) or refuses it (at once: a
// bad DB index, wrong credentials).
func TestMainFailsFastAtStart(t *testing.T) {
	addr := redistest.Shared(t).Addr()
	for _, c := range []struct {
		url, want string
	}{
		{"redis://127.0.0.1:1/0", "no answer from Redis within 5s: ping: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"redis://" + addr + "/99", "DB index is out of range"},
		{"redis://nobody:wrong@" + addr + "/0", "Redis refused the credentials (check the user and password in the URL): WRONGPASS"},
	} {
		t.Run(c.url, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			start := time.Now()
			err := mainWith([]string{"-redis", c.url, "-queue", "fast", "-log-level", "error"}, &stdout, &stderr, square)
			took := time.Since(start)
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "cannot serve") {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
			if strings.Contains(stdout.String(), "worker ") {
				t.Fatal("the worker announced itself without having reached Redis")
			}
			if took > startBudget+5*time.Second { // a liveness bound, loose on purpose
				t.Fatalf("took %v, past its start budget %v", took, startBudget)
			}
		})
	}
}

// A worker says at start which Redis it serves (its password redacted),
// and warns when that is the built-in default: no -redis, no REDIS_URL.
func TestMainSaysWhereItServes(t *testing.T) {
	for _, c := range []struct {
		args      []string
		env       string
		redis     string
		defaulted bool
	}{
		{args: []string{"-queue", "q"}, redis: "redis://127.0.0.1:6379/0", defaulted: true},
		{args: []string{"-queue", "q", "-redis", "redis://u:TOPSECRET@h:1/0"}, redis: "redis://u:xxxxx@h:1/0"},
		{args: []string{"-queue", "q"}, env: "redis://h:2/0", redis: "redis://h:2/0"},
	} {
		t.Run(strings.Join(c.args, " ")+c.env, func(t *testing.T) {
			t.Setenv("REDIS_URL", c.env)
			f, err := parseFlags(c.args, &bytes.Buffer{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			f.announce(slog.New(slog.NewTextHandler(&logs, nil)), "w1", 4)
			out := logs.String()
			if !strings.Contains(out, "redis="+c.redis) || strings.Contains(out, "SECRET") {
				t.Fatalf("logs %q, want redis=%s, redacted", out, c.redis)
			}
			if warned := strings.Contains(out, "no -redis and no REDIS_URL"); warned != c.defaulted {
				t.Fatalf("logs %q: warned of the default Redis %v, want %v", out, warned, c.defaulted)
			}
		})
	}
}
