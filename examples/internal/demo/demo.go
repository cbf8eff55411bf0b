// Package demo holds what the examples' programs share and that is not
// what they show: the Redis they connect to, a worker in the same process
// for a run without set-up, and the Go tree they read.
package demo

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/worker"
)

// Main runs the example program called name. "NAME worker [flags]" is
// worker.Main with hs, on the queue NAME unless REDMAP_QUEUE names
// another; "NAME [CMD] [flags]", CMD one of cmds (the first if there is
// none), is run(CMD, flags); "NAME help" prints usage. Anything else
// prints usage on stderr and exits 2; an error is printed and exits 1.
func Main(name, usage string, cmds []string, run func(cmd string, args []string) error, hs ...redmap.AnyHandle) {
	args := os.Args[1:]
	cmd := cmds[0]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch {
	case cmd == "worker":
		if os.Getenv("REDMAP_QUEUE") == "" {
			os.Setenv("REDMAP_QUEUE", name)
		}
		err = worker.Main(args, hs...)
	case cmd == "help":
		fmt.Println(usage)
	case slices.Contains(cmds, cmd):
		err = run(cmd, args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Connect returns a client of the Redis at REDIS_URL. With REDIS_URL unset
// that is an embedded Redis (miniredis) started in this process if embedded
// is true, redis://127.0.0.1:6379/0 otherwise. go-redis's own logs (its dial
// retries) go through slog at debug level: redmap's errors say what failed.
// closeAll closes the client, then the embedded Redis if any.
func Connect(embedded bool) (rdb redis.UniversalClient, closeAll func(), err error) {
	url := os.Getenv("REDIS_URL")
	var mr *miniredis.Miniredis
	if url == "" && embedded {
		if mr, err = miniredis.Run(); err != nil {
			return nil, nil, err
		}
		url = "redis://" + mr.Addr()
	} else if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	rdb, err = connect.URL(url)
	if err != nil {
		if mr != nil {
			mr.Close()
		}
		return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	return rdb, func() {
		rdb.Close()
		if mr != nil {
			mr.Close()
		}
	}, nil
}

// Worker starts a worker of queue in this process, with hs registered.
// stop stops it and returns when it has drained.
func Worker(rdb redis.UniversalClient, queue string, hs ...redmap.AnyHandle) (stop func(), err error) {
	w, err := worker.New(rdb, worker.Options{Queue: queue})
	if err != nil {
		return nil, err
	}
	if err := w.Register(hs...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	return func() { cancel(); <-ran }, nil
}

// A File is a regular file and its size in bytes.
type File struct {
	Path string
	Size int64
}

// GoFiles returns the .go files under dir.
func GoFiles(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".go") {
			info, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, File{Path: p, Size: info.Size()})
		}
		return nil
	})
	return files, err
}

// GoSrc returns the Go toolchain's source tree, or "" if there is no go
// command to ask.
func GoSrc() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return filepath.Join(strings.TrimSpace(string(out)), "src")
}
