package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
)

// redmap workers names a worker slow from the queue's record of backup
// races (keys.Races, which managers write as their races end): one that
// lost most of at least 2; not one that lost few.
func TestWorkersNameSlow(t *testing.T) {
	e := harness.Setup(t)
	srv, queue := e.Srv, e.Queue
	slow := startWorker(t, srv, queue, "-concurrency", "2")
	fine := startWorker(t, srv, queue, "-concurrency", "2")
	races := keys.Races("redmap", queue)
	if err := e.Client.HSet(context.Background(), races, slow.ID+"\traces", 4, slow.ID+"\tlost", 3,
		fine.ID+"\traces", 4, fine.ID+"\tlost", 1).Err(); err != nil {
		t.Fatal(err)
	}
	var ws []inspect.Worker
	cliJSON(t, srv, &ws, "workers", "-queue", queue)
	for _, w := range ws {
		if w.Slow != (w.ID == slow.ID) || w.BackupRaces != 4 {
			t.Fatalf("worker %s: slow %v, %d of %d races lost; want only %s slow", w.ID, w.Slow, w.Overtaken, w.BackupRaces, slow.ID)
		}
	}
	out, _, code := runCLI(t, srv, "workers", "-queue", queue)
	if code != 0 || !strings.Contains(out, "(slow: 3 of 4 backup races lost)") || strings.Count(out, "slow:") != 1 {
		t.Fatalf("redmap workers (exit %d) names the slow worker once?\n%s", code, out)
	}
}
