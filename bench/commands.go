package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redmap/redmap/internal/broker/redisbroker"
)

// commandLog, with -commands, records every command Redis runs during one
// redmap contender (SLOWLOG with a threshold of 0) and prints, per command
// and per script, the calls and the Redis time per element: where a
// scenario's Redis time goes. It slows Redis down a little, so that run's
// throughput is not one to compare.
type commandLog struct{ e *env }

// start turns the log on, sized for n elements.
func (c commandLog) start(n int) {
	ctx := context.Background()
	c.e.rdb.ConfigSet(ctx, "slowlog-max-len", fmt.Sprint(8*n+10_000))
	c.e.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	c.e.rdb.SlowLogReset(ctx)
}

// report turns the log off and prints what it holds.
func (c commandLog) report(scenario string, n int) error {
	ctx := context.Background()
	c.e.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
	logs, err := c.e.rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return err
	}
	c.e.rdb.SlowLogReset(ctx)
	c.e.rdb.ConfigSet(ctx, "slowlog-max-len", "128")
	names := redisbroker.ScriptNames()
	type tally struct {
		name      string
		calls, us int64
	}
	byName := map[string]*tally{}
	var total int64
	for _, l := range logs {
		if len(l.Args) == 0 {
			continue
		}
		name := strings.ToLower(fmt.Sprint(l.Args[0]))
		if name == "slowlog" || name == "config" || name == "info" {
			continue
		}
		if name == "evalsha" && len(l.Args) > 1 {
			if s, ok := names[fmt.Sprint(l.Args[1])]; ok {
				name = s
			}
		}
		t := byName[name]
		if t == nil {
			t = &tally{name: name}
			byName[name] = t
		}
		t.calls++
		t.us += l.Duration.Microseconds()
		total += l.Duration.Microseconds()
	}
	var ts []*tally
	for _, t := range byName {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *tally) int { return int(b.us - a.us) })
	per := float64(n)
	fmt.Printf("\n%s: Redis time per element %.2f µs (SLOWLOG, %d commands)\n\n", scenario, float64(total)/per, len(logs))
	fmt.Println("| command or script | calls | calls/element | µs/call | µs/element |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, t := range ts {
		fmt.Printf("| %s | %d | %.3f | %.1f | %.2f |\n", t.name, t.calls, float64(t.calls)/per,
			float64(t.us)/float64(t.calls), float64(t.us)/per)
	}
	return nil
}
