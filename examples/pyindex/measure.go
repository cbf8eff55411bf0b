package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// measure runs every job every way, runs times, on a redis-server of its
// own and two worker processes, and prints medians and spreads.
func measure(args []string) error {
	flags := flag.NewFlagSet("measure", flag.ContinueOnError)
	dir := flags.String("dir", defaultDir, "tree whose .py files to read")
	runs := flags.Int("runs", 3, "runs of each")
	parts := flags.Int("partitions", 32, "partitions of the shuffle")
	if err := flags.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	srv := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := srv.Start(); err != nil {
		return fmt.Errorf("starting redis-server (is it installed?): %w", err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer rdb.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d did not answer", port)
		}
	}
	env := append(os.Environ(), "REDIS_URL="+url)
	for range 2 {
		w := exec.Command(self, "worker")
		w.Env = env
		out, err := w.StdoutPipe()
		if err != nil {
			return err
		}
		w.Stderr = os.Stderr
		if err := w.Start(); err != nil {
			return err
		}
		defer func() { w.Process.Signal(os.Interrupt); w.Wait() }()
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "worker ") {
			return fmt.Errorf("worker did not start: %q, %v", line, err)
		}
	}
	type row struct {
		wall, rss, peak []float64
		partials        []float64
		keys            int
		digest          string
	}
	results := map[string]*row{}
	order := []string{}
	for r := range *runs {
		for _, job := range []string{"counts", "index"} {
			for _, how := range []string{"sequential", "fold", "shuffle"} {
				before, err := usedMemory(ctx, rdb)
				if err != nil {
					return err
				}
				c := exec.Command(self, "run", "-dir", *dir, "-job", job, "-how", how, "-partitions", strconv.Itoa(*parts))
				c.Env = env
				c.Stderr = os.Stderr
				// Redis's peak while it runs: INFO every 10 ms (CONFIG
				// RESETSTAT does not reset used_memory_peak).
				peakOf := sample(ctx, rdb)
				out, err := c.Output()
				peak := peakOf()
				if err != nil {
					return fmt.Errorf("%s %s: %w", job, how, err)
				}
				f := fields(string(out))
				key := job + " " + how
				if results[key] == nil {
					results[key] = &row{}
					order = append(order, key)
				}
				x := results[key]
				wall, _ := strconv.ParseFloat(f["wall"], 64)
				rss, _ := strconv.ParseFloat(f["rss"], 64)
				x.wall = append(x.wall, wall)
				x.rss = append(x.rss, rss/(1<<20))
				x.peak = append(x.peak, float64(peak-before)/(1<<20))
				partials, _ := strconv.ParseFloat(f["partials"], 64)
				x.partials = append(x.partials, partials/(1<<20))
				x.keys, _ = strconv.Atoi(f["keys"])
				if x.digest != "" && x.digest != f["digest"] {
					x.digest = "differs between runs"
				} else {
					x.digest = f["digest"]
				}
				fmt.Fprintf(os.Stderr, "run %d: %s", r+1, out)
			}
		}
	}
	fmt.Printf(".py files under %s; 2 worker processes; %d runs each: median (min–max)\n\n", *dir, *runs)
	fmt.Println("| job | how | wall s | manager peak RSS MiB | Redis peak above start MiB | partials stored MiB | keys | exact |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, key := range order {
		x := results[key]
		job, _, _ := strings.Cut(key, " ")
		exact := "yes"
		if x.digest != results[job+" sequential"].digest {
			exact = "**no**"
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d | %s |\n", job, strings.TrimPrefix(key, job+" "), spread(x.wall, 2), spread(x.rss, 0), spread(x.peak, 1), spread(x.partials, 1), x.keys, exact)
	}
	return nil
}

// fields parses a "result k=v k=v" line.
func fields(line string) map[string]string {
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

// usedMemory returns Redis's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory has no used_memory")
}

// sample reads Redis's used memory every 10 ms until the function it
// returns is called, which returns the largest reading.
func sample(ctx context.Context, rdb *redis.Client) func() int64 {
	stop := make(chan struct{})
	done := make(chan int64)
	go func() {
		var peak int64
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if n, err := usedMemory(ctx, rdb); err == nil {
				peak = max(peak, n)
			}
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { close(stop); return <-done }
}

// spread formats the median of xs and their range.
func spread(xs []float64, prec int) string {
	s := slices.Sorted(slices.Values(xs))
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s[len(s)/2], prec, s[0], prec, s[len(s)-1])
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
