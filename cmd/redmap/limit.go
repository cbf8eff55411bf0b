package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/keys"
)

// limit sets, clears or lists the queue's functions' limits.
func (c *cli) limit(ctx context.Context, operand []string) error {
	q := operand[0]
	if err := keys.CheckQueue(q); err != nil {
		return usageError{err.Error()}
	}
	changes := c.given["rate"] || c.given["burst"] || c.given["concurrency"]
	if len(operand) == 1 {
		if changes || c.clear {
			return usageError{"limit: -rate, -burst, -concurrency and -clear need a function"}
		}
		ls, err := c.in.Limits(ctx, q)
		if err != nil {
			return err
		}
		if c.json {
			return c.emit(orEmpty(ls))
		}
		c.table("FUNC\tLIMIT\tSOURCE\tRUNNING\tWAITING\tREFUSED\tRETRY-AFTER", limitRows(ls, time.Now()))
		return nil
	}
	fn := operand[1]
	var l inspect.Limit
	var err error
	switch {
	case c.clear && changes:
		return usageError{"limit: -clear takes no -rate, -burst or -concurrency"}
	case c.clear:
		l, err = c.in.ClearLimit(ctx, q, fn)
	case !changes:
		return usageError{"limit: say -rate, -burst, -concurrency (0 for none) or -clear"}
	default:
		var lim redmap.Limit
		if lim, err = c.changedLimit(ctx, q, fn); err != nil {
			return err
		}
		l, err = c.in.SetLimit(ctx, q, fn, lim)
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.emit(l)
	}
	from := "set by an operator"
	switch l.Source {
	case "code":
		from = "declared with its handle"
	case "":
		from = "no record"
	}
	fmt.Fprintf(c.out, "%s on queue %s: %s (%s)\n", fn, q, l.InForce, from)
	return nil
}

// changedLimit returns function fn's limit in force on queue q (the
// operator's, or the one declared with its handle) with the fields the
// command line gave changed, and the others as they are.
func (c *cli) changedLimit(ctx context.Context, q, fn string) (redmap.Limit, error) {
	ls, err := c.in.Limits(ctx, q)
	if err != nil {
		return redmap.Limit{}, err
	}
	var lim redmap.Limit
	for _, l := range ls {
		if l.Func == fn {
			lim = l.InForce
		}
	}
	if c.given["rate"] {
		if lim.Rate, lim.Per, err = parseRate(c.rate); err != nil {
			return lim, usageError{err.Error()}
		}
	}
	if c.given["burst"] {
		lim.Burst = c.burst
	}
	if c.given["concurrency"] {
		lim.Concurrency = c.concurrency
	}
	if lim.Rate == 0 {
		if c.given["burst"] && c.burst != 0 {
			return lim, usageError{"limit: -burst needs a -rate"}
		}
		lim.Per, lim.Burst = 0, 0 // a burst is of a rate: none without one
	}
	return lim, nil
}

// parseRate reads a rate: "N/s", "N/min", "N/h", "N/<duration>", or "N" (a
// second); "" is none.
func parseRate(s string) (float64, time.Duration, error) {
	if s == "" {
		return 0, 0, nil
	}
	n, unit, per := s, "s", time.Second
	if i := strings.IndexByte(s, '/'); i >= 0 {
		n, unit = s[:i], s[i+1:]
	}
	rate, err := strconv.ParseFloat(n, 64)
	if err != nil || rate < 0 {
		return 0, 0, fmt.Errorf("limit: -rate %q: want N/s, N/min, N/h or N/<duration>", s)
	}
	switch unit {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	default:
		if per, err = time.ParseDuration(unit); err != nil || per <= 0 {
			return 0, 0, errors.New("limit: -rate " + strconv.Quote(s) + ": the interval after / is s, min, h or a duration")
		}
	}
	return rate, per, nil
}

// limitRows are the rows of redmap limit's table.
func limitRows(ls []inspect.Limit, now time.Time) [][]string {
	var rows [][]string
	for _, l := range ls {
		src := l.Source
		if src == "" {
			src = "-"
		}
		if l.By != "" {
			src += " (" + l.By + ", " + dur(now.Sub(l.Set)) + " ago)"
		}
		if l.Code != "" {
			src += "; code declares " + l.Code
		}
		lim := l.InForce.String()
		if l.Problem != "" {
			lim = "unreadable: " + l.Problem
		}
		rows = append(rows, []string{l.Func, lim, src, strconv.FormatInt(l.Running, 10), strconv.FormatInt(l.Waiting, 10), strconv.FormatInt(l.Refused, 10), strconv.FormatInt(l.RetryAfter, 10)})
	}
	return rows
}
