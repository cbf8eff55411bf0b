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
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/worker"
)

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
