// Package picture draws docs/architecture.svg, the map of redmap's parts
// and protocol that docs/ARCHITECTURE.md opens with, from the description
// below: boxes placed on a grid and the calls between them. TestPicture
// (docs_test.go) checks the committed file is what Architecture draws;
// `make docs` writes it again after a change here.
package picture

import (
	"fmt"
	"html"
	"strings"
)

// box is a rectangle with a title and lines of text; x, y, w, h in pixels.
type box struct {
	id         string
	x, y, w, h int
	title      string
	lines      []string
	fill       string
}

// arrow is a call or a hand-off from one box to another, along its points
// (pixels); its label sits between its first and last point.
type arrow struct {
	points [][2]int
	label  string // lines split by "\n"
	dashed bool
	at     [2]int // where the label's first line sits; zero: its middle
}

const (
	manager  = "#e8f0fe"
	redis    = "#fde8e8"
	worker   = "#e6f4ea"
	operator = "#fef7e0"
)

// The parts: a manager program, Redis, a worker process, the operators'
// tools. Coordinates are by hand: the picture is small enough.
var boxes = []box{
	{"user", 20, 40, 230, 60, "your program", []string{"manager.Map / Submit / ReduceByKey", "Batch.Wait → outputs, *BatchError"}, manager},
	{"feeder", 20, 130, 230, 70, "feeder (one per batch)", []string{"cuts chunks by measured cost", "registers, then submits tasks"}, manager},
	{"collector", 20, 230, 230, 70, "collector (one per shard)", []string{"reads the result list", "counts a result only if pending"}, manager},
	{"keeper", 20, 330, 230, 84, "keeper · reaper · recoverer", []string{"renew keys, publish progress", "reap dead workers, no-worker check", "audit the task set, resubmit lost"}, manager},

	{"tasks", 340, 40, 260, 62, "task set  m:<mid>:tasks", []string{"the truth: a result counts only", "while its task is here"}, redis},
	{"lanes", 340, 120, 260, 62, "lanes, rings, private lists", []string{"task ids waiting to be taken"}, redis},
	{"held", 340, 200, 260, 62, "held sets  w:<wid>:held", []string{"taken, not yet reported; workers ZSET", "(lease) for the reap"}, redis},
	{"results", 340, 280, 260, 62, "result list  m:<mid>:results", []string{"results, lost/purged notices"}, redis},
	{"records", 340, 360, 260, 62, "records for operators", []string{"progress, history, failure groups,", "worker info, limits"}, redis},
	{"objects", 340, 440, 260, 54, "object cache  obj:{blake3}", []string{"constants, refcounted by holds"}, redis},

	{"fetcher", 690, 110, 240, 62, "fetcher", []string{"takes tasks into the held ledger", "suspects alone"}, worker},
	{"executors", 690, 190, 240, 62, "executors + engine", []string{"run the function per element:", "retries, timeouts, panics"}, worker},
	{"finisher", 690, 270, 240, 62, "finisher", []string{"reports results in calls of ≤ 1 MiB"}, worker},
	{"maintainer", 690, 350, 240, 62, "maintainer", []string{"heartbeat, reap, cancel unwanted,", "failure groups"}, worker},
	{"memo", 690, 440, 240, 54, "memo (LRU)", []string{"constants decoded once per worker"}, worker},

	{"ops", 20, 450, 230, 60, "operators", []string{"redmap CLI · dashboard · metrics", "read through inspect"}, operator},
}

var arrows = []arrow{
	{points: [][2]int{{135, 100}, {135, 130}}},
	{points: [][2]int{{250, 155}, {340, 75}}, label: "submit.lua", at: [2]int{292, 104}},
	{points: [][2]int{{250, 175}, {340, 151}}},
	{points: [][2]int{{340, 311}, {250, 270}}, label: "BLMOVE\ntrim.lua", at: [2]int{296, 270}},
	{points: [][2]int{{20, 265}, {8, 265}, {8, 70}, {20, 70}}, dashed: false},
	{points: [][2]int{{250, 372}, {340, 391}}, label: "publish.lua\nrecord.lua", at: [2]int{295, 350}},
	{points: [][2]int{{600, 151}, {690, 141}}, label: "take.lua"},
	{points: [][2]int{{690, 290}, {600, 300}}, label: "finish.lua"},
	{points: [][2]int{{810, 172}, {810, 190}}},
	{points: [][2]int{{810, 252}, {810, 270}}},
	{points: [][2]int{{690, 395}, {600, 250}}, label: "heartbeat\nreap.lua", at: [2]int{660, 352}},
	{points: [][2]int{{690, 467}, {600, 467}}, label: "fetch once"},
	{points: [][2]int{{250, 480}, {340, 410}}, label: "inspect", dashed: true, at: [2]int{282, 462}},
}

// Architecture returns the SVG of the map.
func Architecture() []byte {
	var b strings.Builder
	const width, height = 950, 520
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	for _, c := range []struct {
		x    int
		text string
	}{{135, "MANAGER (your process)"}, {470, "REDIS (one slot per queue shard)"}, {810, "WORKER (any number of processes)"}} {
		fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-weight="bold" fill="#333">%s</text>`+"\n", c.x, html.EscapeString(c.text))
	}
	for _, x := range boxes {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="#555"/>`+"\n", x.x, x.y, x.w, x.h, x.fill)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x.x+8, x.y+17, html.EscapeString(x.title))
		for i, l := range x.lines {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#333">%s</text>`+"\n", x.x+8, x.y+33+15*i, html.EscapeString(l))
		}
	}
	for _, a := range arrows {
		pts := make([]string, len(a.points))
		for i, p := range a.points {
			pts[i] = fmt.Sprintf("%d,%d", p[0], p[1])
		}
		dash := ""
		if a.dashed {
			dash = ` stroke-dasharray="5,4"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#444" stroke-width="1.4"%s marker-end="url(#head)"/>`+"\n", strings.Join(pts, " "), dash)
		if a.label != "" {
			first, last := a.points[0], a.points[len(a.points)-1]
			at := [2]int{(first[0] + last[0]) / 2, (first[1]+last[1])/2 - 4}
			if a.at != ([2]int{}) {
				at = a.at
			}
			for i, l := range strings.Split(a.label, "\n") {
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="11" fill="#222" stroke="#fff" stroke-width="3" paint-order="stroke">%s</text>`+"\n", at[0], at[1]+13*i, html.EscapeString(l))
			}
		}
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}
