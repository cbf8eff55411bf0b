package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/redmap/redmap/connect"
)

// command is one of the CLI's commands: its name and operands, what it
// does, and its own flags. Every command also takes the common flags
// (commonFlags); the usage is made from this table and the flags' help.
type command struct {
	name     string
	operands []string // the names of its operands, each required but the last optional ones
	optional int      // how many of the last operands may be left out
	help     string
	flags    func(fs *flag.FlagSet, c *cli, o *invocation) // its own flags, if any
	// run runs it with its operands, once Redis answered (nil for
	// dashboard and metrics, which serve instead).
	run func(c *cli, ctx context.Context, operand []string) error
}

// commands lists the CLI's commands, in the order the usage shows them.
var commands = []command{
	{name: "status", help: "queues with depth, workers, running batches, the busiest first; idle queues (nothing queued, running or ended in 15 minutes) counted in one line",
		run: noOperand((*cli).status), flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
			fs.BoolVar(&c.all, "all", false, "list the idle queues too, with their workers and limits")
		}},
	{name: "workers", help: "workers with their state (running, idle, draining, late; dead or stopped for 10 minutes after), heartbeat age and what they run",
		run: noOperand((*cli).workers)},
	{name: "batches", help: "running batches with progress; durable ones with their name and state (running, orphaned: no manager holds it, done: every result waits for the call that takes it over)", run: noOperand((*cli).batches), flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
		fs.BoolVar(&c.all, "all", false, "the queue's history of ended batches too, newest first")
		fs.IntVar(&c.n, "n", 50, "with -all, how many ended batches")
	}},
	{name: "failures", help: "failed elements counted by function, kind and group (the message with numbers, ids and paths masked), largest first; with -batch, that ended batch's failed elements",
		run: noOperand((*cli).failures), flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
			fs.IntVar(&c.n, "n", 50, "how many groups")
			fs.StringVar(&c.batch, "batch", "", "list the failed elements of this ended batch (its id, as batches -all shows it): index, kind, attempts, worker, error")
		}},
	{name: "drain", operands: []string{"worker"}, help: "the worker (its id, or a unique prefix of it) takes no more tasks and exits when idle",
		run: oneOperand((*cli).drain)},
	{name: "cancel", operands: []string{"queue", "name"}, help: "cancel what name names (inspect.Inspector.Cancel): a running batch by its id (its manager ends it within its Poll, its call returns ErrCancelled); pipeline name (its name or job id, as batches shows it, or the id of any batch of it: every stage ends, the running batch at its manager's next Poll, no later one starts, and its call returns ErrCancelled), or durable batch or job name (manager.Durable; a ReduceByKey's every phase, name/map, name/reduce@N, and its partitions): its tasks are withdrawn at once, whoever holds it, and a manager holding it ends its call within its Poll; the call that takes it over fails its elements with ErrCancelled. One that has ended is left alone: its results wait for that call",
		run: (*cli).cancel, flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
			fs.BoolVar(&c.discard, "discard", false, "cancel it even if it has ended, dropping the results that wait for the call that takes it over")
		}},
	{name: "pause", operands: []string{"queue"}, help: "stop the taking of the queue's tasks: its workers finish what they hold and take nothing more; its batches wait, their managers warning, until resume",
		run: oneOperand((*cli).pause), flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
			fs.StringVar(&c.by, "by", "", "who pauses it, for the record status shows (default $USER)")
		}},
	{name: "resume", operands: []string{"queue"}, help: "let the queue's workers take its tasks again, at once",
		run: oneOperand((*cli).resume)},
	{name: "purge", operands: []string{"queue"}, help: "drop the queue's queued tasks; their batches fail with ErrLost", run: oneOperand((*cli).purge), flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
		fs.BoolVar(&c.yes, "yes", false, "really purge (without it, purge only says what it would drop)")
	}},
	{name: "limit", operands: []string{"queue", "function"}, optional: 1,
		help: "set a function's fleet-wide limit as an operator (it wins over the one declared with the function's handle; takes enforce it at once), or with -clear drop it; without function, list every function's limit in force, where it comes from, and the tasks running and waiting under it",
		run:  (*cli).limit, flags: func(fs *flag.FlagSet, c *cli, _ *invocation) {
			fs.StringVar(&c.rate, "rate", "", "elements started per interval across the fleet: `N/s`, N/min, N/h, N/100ms (N alone: a second); 0 for none")
			fs.IntVar(&c.burst, "burst", 0, "most elements started at once after a quiet spell (default a tenth of a second's rate, at least 1)")
			fs.IntVar(&c.concurrency, "concurrency", 0, "most elements running at once across the fleet; 0 for no cap")
			fs.BoolVar(&c.clear, "clear", false, "drop the operator's limit: the one declared with the function's handle, if any, is in force again")
		}},
	{name: "backlog", help: "the tasks waiting and running (for scripts: with -queue, the number alone); with -json, every metric of the queue",
		run: noOperand((*cli).backlog)},
	{name: "metrics", help: "serve Prometheus metrics of the queues at /metrics, read from Redis at each scrape (they exist with no worker: scale from zero on them), and the probes /healthz (liveness, never Redis) and /readyz (Redis answers), until SIGINT or SIGTERM",
		flags: func(fs *flag.FlagSet, _ *cli, o *invocation) {
			fs.StringVar(&o.addr, "addr", ":9121", "the address to serve on")
		}},
	{name: "dashboard", help: "serve the live web dashboard until SIGINT or SIGTERM", flags: func(fs *flag.FlagSet, _ *cli, o *invocation) {
		fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "the address to serve on")
		fs.BoolVar(&o.actions, "actions", false, "let operators drain workers, cancel batches and purge queues, with the operator token ("+tokenEnv+", or -token-file; on a loopback address without one, a random token is made and printed)")
		fs.BoolVar(&o.private, "private", false, "need the operator token to read the state as well")
		fs.StringVar(&o.tokenFile, "token-file", "", "read the operator token from this file")
		fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (with -tls-key)")
		fs.StringVar(&o.tlsKey, "tls-key", "", "the key of -tls-cert")
		fs.Func("host", "`names` (comma-separated) the dashboard answers to besides IP addresses and localhost: its DNS name, or a reverse proxy's; other Host headers are refused", func(v string) error {
			for _, h := range strings.Split(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					o.hosts = append(o.hosts, h)
				}
			}
			return nil
		})
	}},
}

// noOperand and oneOperand make a command's run of a cli method.
func noOperand(f func(*cli, context.Context) error) func(*cli, context.Context, []string) error {
	return func(c *cli, ctx context.Context, _ []string) error { return f(c, ctx) }
}

func oneOperand(f func(*cli, context.Context, string) error) func(*cli, context.Context, []string) error {
	return func(c *cli, ctx context.Context, operand []string) error { return f(c, ctx, operand[0]) }
}

// commonFlags adds the flags every command takes.
func commonFlags(fs *flag.FlagSet, c *cli, o *invocation) {
	def := os.Getenv("REDIS_URL")
	if def == "" {
		def = "redis://127.0.0.1:6379/0"
	}
	o.url.URL = def
	fs.Var(&o.url, "redis", "the Redis `URL`: one server, a Cluster, Sentinel, TLS, ACL users (connect.URL); $REDIS_URL if set")
	fs.StringVar(&o.prefix, "prefix", "redmap", "the key prefix managers and workers use")
	fs.StringVar(&c.queue, "queue", "", "only this queue")
	fs.BoolVar(&c.json, "json", false, "machine-readable output")
	fs.BoolVar(&o.scan, "scan", false, "first find the queues by walking the whole keyspace (SCAN, slow beside many other keys) and add them to the index of queues the commands read: once, after upgrading from a build that kept no index")
}

// lookup returns the command named name, or nil.
func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// flagSet returns the common flags and cmd's, set into c and o; with cmd
// nil, every command's (a flag two commands have, once): the set that finds
// which command a line names, whose values are thrown away.
func flagSet(cmd *command, c *cli, o *invocation) *flag.FlagSet {
	fs := flag.NewFlagSet("redmap", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	commonFlags(fs, c, o)
	for i := range commands {
		k := &commands[i]
		if k.flags == nil || cmd != nil && cmd != k {
			continue
		}
		own := flag.NewFlagSet(k.name, flag.ContinueOnError)
		k.flags(own, c, o)
		own.VisitAll(func(f *flag.Flag) {
			if fs.Lookup(f.Name) == nil {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	return fs
}

// invocation is a command line: the command, its operands, and the flags
// that are not the cli's own.
type invocation struct {
	url                        connect.URLFlag // -h shows it without its password
	hosts                      []string
	cmd                        *command
	prefix, addr               string
	tokenFile, tlsCert, tlsKey string
	operand                    []string
	actions, private           bool
	scan                       bool // index the queues found by SCAN first
	help                       bool // print the usage (of cmd, if set)
}

// parseArgs reads a command line; flags may come before and after the
// command and its operands. Each command takes the common flags and its
// own: another's is an error.
func parseArgs(args []string, c *cli) (*invocation, error) {
	// Find the command, skipping the flags of any.
	var scratch invocation
	pos, err := parse(flagSet(nil, &cli{}, &scratch), args)
	switch {
	case errors.Is(err, flag.ErrHelp) && len(pos) > 0: // redmap purge -h
		return &invocation{help: true, cmd: lookup(pos[0])}, nil
	case errors.Is(err, flag.ErrHelp):
		return &invocation{help: true}, nil
	case err != nil:
		return nil, usageError{err.Error()}
	}
	if len(pos) == 0 || pos[0] == "help" {
		o := &invocation{help: true}
		if len(pos) > 1 {
			o.cmd = lookup(pos[1])
		}
		return o, nil
	}
	cmd := lookup(pos[0])
	if cmd == nil {
		return nil, usageError{fmt.Sprintf("unknown command %q", pos[0])}
	}
	// Then read the line again with the command's flags only.
	o := &invocation{cmd: cmd}
	fs := flagSet(cmd, c, o)
	pos, err = parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return &invocation{help: true, cmd: cmd}, nil
	}
	if err != nil {
		return nil, usageError{fmt.Sprintf("%s: %v", cmd.name, err)}
	}
	c.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	if o.operand = pos[1:]; len(o.operand) > len(cmd.operands) || len(o.operand) < len(cmd.operands)-cmd.optional {
		want := strconv.Itoa(len(cmd.operands))
		if cmd.optional > 0 {
			want = fmt.Sprintf("%d to %d", len(cmd.operands)-cmd.optional, len(cmd.operands))
		}
		return nil, usageError{fmt.Sprintf("%s takes %s argument(s), got %d", cmd.name, want, len(o.operand))}
	}
	return o, nil
}

// parse parses args with fs, flags and positional arguments mixed, and
// returns the positional ones (those before the error, if any).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return pos, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// usage writes the usage of cmd, or of every command if nil, made from the
// command table and the flags' help.
func usage(w io.Writer, cmd *command) {
	fmt.Fprintln(w, "usage: redmap [flags] command [operands]")
	fmt.Fprintln(w, "\ncommands:")
	for i := range commands {
		k := &commands[i]
		if cmd != nil && k != cmd {
			continue
		}
		line := k.name
		for j, op := range k.operands {
			if j >= len(k.operands)-k.optional {
				line += " [<" + op + ">]"
			} else {
				line += " <" + op + ">"
			}
		}
		fmt.Fprintf(w, "  %s\n      %s\n", line, k.help)
		if k.flags != nil {
			fs := flag.NewFlagSet(k.name, flag.ContinueOnError)
			k.flags(fs, &cli{}, &invocation{})
			fs.SetOutput(indented{w, "    "})
			fs.PrintDefaults()
		}
	}
	fmt.Fprintln(w, "\nflags of every command (before or after it):")
	fs := flag.NewFlagSet("redmap", flag.ContinueOnError)
	commonFlags(fs, &cli{}, &invocation{})
	fs.SetOutput(indented{w, ""})
	fs.PrintDefaults()
	if cmd == nil {
		fmt.Fprintln(w, "\nredmap help <command> shows one command. Errors are one line on stderr with exit status 1; bad usage exits 2.")
	}
}

// indented prefixes each line written through it.
type indented struct {
	w      io.Writer
	prefix string
}

func (i indented) Write(p []byte) (int, error) {
	s := strings.TrimSuffix(string(p), "\n")
	_, err := fmt.Fprintln(i.w, i.prefix+strings.ReplaceAll(s, "\n", "\n"+i.prefix))
	return len(p), err
}
