package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// What one scrape of a queue's backlog costs (go run ./bench -scrape): a
// queue with scrapeBatches running batches and scrapeTasks tasks waiting in
// Redis (no worker), scraped scrapeRuns times by each contender in turn:
//   - redmap metrics: GET /metrics of Inspector.MetricsHandler, every
//     metric of the queue;
//   - the leanest scraper a user would write for waiting tasks alone: read
//     the ring of lanes, then LLEN each lane in one pipeline (what KEDA's
//     Redis lists scaler does for one list).
//
// It prints, per contender, the median time of a scrape and its spread,
// Redis's CPU per scrape (INFO cpu, over all the scrapes; the managers'
// own upkeep runs meanwhile, for both contenders alike) and the round trips
// of a scrape (a command or a pipeline each).
const (
	scrapeBatches  = 1000
	scrapeTasks    = 100_000
	scrapeManagers = 25 // each under the 4,096 tasks a manager keeps in Redis
	scrapeRuns     = 30
)

// scrapeOnly is -scrape: run measures the scrape instead of the scenarios.
var scrapeOnly bool

var idle = redmap.Func("bench-scrape-idle", func(_ context.Context, x int) (int, error) { return x, nil })

func runScrape(e *env) error {
	ctx := context.Background()
	queue := "bench-scrape"
	fmt.Fprintf(os.Stderr, "scrape: submitting %d batches of %d tasks, no worker...\n", scrapeBatches, scrapeTasks/scrapeBatches)
	var ms []*manager.Manager
	defer func() {
		for _, m := range ms {
			m.Close()
		}
	}()
	xs := make([]int, scrapeTasks/scrapeBatches)
	for i := range scrapeManagers {
		m, err := manager.New(e.rdb, manager.Options{Queue: queue, NoWorkerTimeout: -1})
		if err != nil {
			return err
		}
		ms = append(ms, m)
		for range scrapeBatches / scrapeManagers {
			if _, err := manager.Submit(ctx, m, idle, xs, manager.ChunkSize(1)); err != nil {
				return fmt.Errorf("manager %d: %w", i, err)
			}
		}
	}
	in, err := inspect.New(e.rdb, config.DefaultPrefix)
	if err != nil {
		return err
	}
	// Wait until Redis has every task and every batch's progress.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		m, err := in.Metrics(ctx, queue)
		if err != nil {
			return err
		}
		if m.WaitingTasks == scrapeTasks && m.RunningBatches == scrapeBatches {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d tasks of %d batches in Redis, want %d of %d", m.WaitingTasks, m.RunningBatches, scrapeTasks, scrapeBatches)
		}
		time.Sleep(100 * time.Millisecond) // polling what managers write on their own schedule
	}

	// A client of its own per contender, to count its round trips.
	counted := func() (redis.UniversalClient, *redistest.RoundTrips, error) {
		c, err := connect.URL(e.url)
		if err != nil {
			return nil, nil, err
		}
		rt := &redistest.RoundTrips{}
		c.AddHook(rt)
		return c, rt, nil
	}
	mc, mrt, err := counted()
	if err != nil {
		return err
	}
	defer mc.Close()
	min, err := inspect.New(mc, config.DefaultPrefix)
	if err != nil {
		return err
	}
	srv := httptest.NewServer(min.MetricsHandler(func(context.Context) ([]string, error) { return []string{queue}, nil }))
	defer srv.Close()
	bc, brt, err := counted()
	if err != nil {
		return err
	}
	defer bc.Close()

	type contender struct {
		name   string
		rt     *redistest.RoundTrips
		scrape func() (float64, error) // the waiting tasks it read
	}
	contenders := []contender{
		{"redmap metrics (GET /metrics, every metric)", mrt, func() (float64, error) {
			resp, err := http.Get(srv.URL)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET /metrics: %s %v", resp.Status, err)
			}
			var v float64
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "redmap_queue_waiting_tasks{") {
					_, err = fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
				}
			}
			return v, err
		}},
		{"baseline: LRANGE the ring, LLEN each lane in one pipeline (waiting tasks only)", brt, func() (float64, error) {
			lanes, err := bc.LRange(ctx, keys.Ring(config.DefaultPrefix, queue, keys.DefaultPriority), 0, -1).Result()
			if err != nil {
				return 0, err
			}
			cmds, err := bc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, l := range lanes {
					p.LLen(ctx, keys.Lane(config.DefaultPrefix, queue, l))
				}
				return nil
			})
			var n int64
			for _, c := range cmds {
				n += c.(*redis.IntCmd).Val()
			}
			return float64(n), err
		}},
	}
	times := make([][]time.Duration, len(contenders))
	cpu := make([]time.Duration, len(contenders))
	trips := make([]int64, len(contenders))
	for range scrapeRuns {
		for i, c := range contenders { // interleaved
			before, tripsBefore := sum(e.redisCPUTimes()), c.rt.N()
			start := time.Now()
			got, err := c.scrape()
			elapsed := time.Since(start)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if got != scrapeTasks {
				return fmt.Errorf("%s read %v waiting tasks, want %d", c.name, got, scrapeTasks)
			}
			trips[i] += c.rt.N() - tripsBefore
			cpu[i] += sum(e.redisCPUTimes()) - before
			times[i] = append(times[i], elapsed)
		}
	}
	fmt.Printf("scrape of one queue with %d running batches (%d managers) and %d waiting tasks, no worker; %d scrapes per contender, interleaved\n\n",
		scrapeBatches, scrapeManagers, scrapeTasks, scrapeRuns)
	fmt.Println("| contender | scrape time (median) | spread (min–max) | Redis CPU per scrape | round trips per scrape |")
	fmt.Println("|---|---|---|---|---|")
	for i, c := range contenders {
		ts := slices.Clone(times[i])
		slices.Sort(ts)
		fmt.Printf("| %s | %v | %v–%v | %v | %d |\n", c.name, ts[len(ts)/2].Round(10*time.Microsecond),
			ts[0].Round(10*time.Microsecond), ts[len(ts)-1].Round(10*time.Microsecond),
			(cpu[i] / scrapeRuns).Round(10*time.Microsecond), trips[i]/scrapeRuns)
	}
	return nil
}
