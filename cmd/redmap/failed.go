package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redmap/redmap/inspect"
)

// failedElements lists the failed elements of ended batch c.batch: of
// -queue, or of the queue whose history holds it.
func (c *cli) failedElements(ctx context.Context) error {
	qs, err := c.queues(ctx)
	if err != nil {
		return err
	}
	var found *inspect.FailedElements
	for _, q := range qs {
		fs, err := c.in.FailedElements(ctx, q, c.batch)
		if err != nil {
			return err
		}
		if fs.InRecord || len(fs.Elements) > 0 || fs.Omitted > 0 {
			found = &fs
			break
		}
	}
	if found == nil {
		return fmt.Errorf("no ended batch %q in the history of %s (a running batch's failed elements are listed once it ends; a record leaves the history after its manager's HistoryAge)",
			c.batch, queuesSaid(qs))
	}
	if c.json {
		return c.emit(found)
	}
	rows := make([][]string, 0, len(found.Elements))
	for _, f := range found.Elements {
		w := f.Worker
		if w == "" {
			w = "-"
		}
		rows = append(rows, []string{index(f), f.Kind, strconv.Itoa(f.Attempts), w, strings.Join(strings.Fields(f.Error), " ")})
	}
	fmt.Fprintf(c.out, "batch %s of queue %s: %d failed elements listed", found.Batch, found.Queue, len(found.Elements))
	if found.Omitted > 0 {
		fmt.Fprintf(c.out, ", %d more not listed (at most 1,000 are)", found.Omitted)
	}
	fmt.Fprintln(c.out)
	if len(rows) > 0 {
		fmt.Fprintln(c.out)
		c.table("INDEX\tKIND\tATTEMPTS\tWORKER\tERROR", rows)
	}
	return nil
}

// queuesSaid names the queues searched.
func queuesSaid(qs []string) string {
	if len(qs) == 1 {
		return "queue " + strconv.Quote(qs[0])
	}
	return strconv.Itoa(len(qs)) + " queues"
}

// index shows where failed element f is: its index, or a pipeline's key
// (past a by-key step, where elements have no index); with the step it
// failed in, for a pipeline's.
func index(f inspect.FailedElement) string {
	at := strconv.Itoa(f.Index)
	if f.Index < 0 && f.Key != "" {
		at = "key " + f.Key
	}
	if f.Stage > 0 {
		at += fmt.Sprintf(" (step %d)", f.Stage)
	}
	return at
}
