package redisbroker

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// lua holds the scripts, one file each, each opening with its contract, and
// prelude.lua, the names they share.
//
//go:embed *.lua
var lua embed.FS

// The scripts, each loaded once with the prelude in front of it and run by SHA.
var (
	submitScript    = load("submit.lua")
	fenceScript     = load("fence.lua")
	sumsScript      = load("sums.lua")
	pipelineScript  = load("pipeline.lua")
	unrecordScript  = load("unrecord.lua")
	retractScript   = load("retract.lua")
	takeScript      = load("take.lua")
	finishScript    = load("finish.lua")
	heartbeatScript = load("heartbeat.lua")
	liveScript      = load("live.lua")
	trimScript      = load("trim.lua")
	missingScript   = load("missing.lua")
	auditScript     = load("audit.lua")
	asideScript     = load("aside.lua")
	reapScript      = load("reap.lua")
	givebackScript  = load("giveback.lua")
	unwantedScript  = load("unwanted.lua")
	servedScript    = load("served.lua")
	pauseScript     = load("pause.lua")
	holdScript      = load("hold.lua")
	releaseScript   = load("release.lua")
	purgeScript     = load("purge.lua")
	probeScript     = load("probe.lua")
	shardsScript    = load("shards.lua")
	depthScript     = load("depth.lua")
	backlogScript   = load("backlog.lua")
	renewScript     = load("renew.lua")
	publishScript   = load("publish.lua")
	recordScript    = load("record.lua")
	lostScript      = load("lost.lua")
	withdrawScript  = load("withdraw.lua")
	failuresScript  = load("failures.lua")
	failedScript    = load("failed.lua")
	stagesScript    = load("stages.lua")
	claimScript     = load("claim.lua")
	resumeScript    = load("resume.lua")
	cancelScript    = load("cancel.lua")
	limitScript     = load("limit.lua")
	throttleScript  = load("throttle.lua")
	indexScript     = load("index.lua")
	wakeScript      = load("wake.lua")
	backupScript    = load("backup.lua")
)

// ScriptNames maps each script's SHA-1 to its file name, for tools that read
// EVALSHA calls back from Redis (SLOWLOG, MONITOR).
func ScriptNames() map[string]string {
	out := map[string]string{}
	for _, s := range loaded {
		out[s.Hash()] = s.name
	}
	return out
}

// migrationGuard ends the name of the key every script declares last, after
// its own KEYS: a key in the slot of the script's first key that never
// exists. While a Cluster migrates that slot, a command declaring a key the
// slot's source node lacks is redirected (ASK) and the target refuses
// several keys some of which it lacks (TRYAGAIN): with the guard, a script
// is refused before it runs for as long as its slot is moving, never
// stopped half-way by a key that moved (Redis does not roll back a script's
// writes). A refused call is transient, and retried.
const migrationGuard = ":~migration-guard"

// guarded returns ks with the migration guard of ks[0]'s slot appended.
func guarded(ks []string) []string {
	return append(ks[:len(ks):len(ks)], ks[0]+migrationGuard)
}

// run runs the script with ks (and its migration guard) as its KEYS.
func (s *script) run(ctx context.Context, c redis.Scripter, ks []string, args ...any) *redis.Cmd {
	return s.Run(ctx, c, guarded(ks), args...)
}

// evalSha queues the script on a pipeline, by SHA only, with ks (and its
// migration guard) as its KEYS.
func (s *script) evalSha(ctx context.Context, c redis.Scripter, ks []string, args ...any) *redis.Cmd {
	return s.EvalSha(ctx, c, guarded(ks), args...)
}

// inTx queues the script in a MULTI on p with ks (and its migration guard)
// as its KEYS: by SHA, or, if whole, as its source (EVAL, which also caches
// it). A MULTI whose EVALSHA met NOSCRIPT is sent again whole: a user whom
// the ACL lets run scripts may still not run SCRIPT LOAD (docs/connecting.md).
func (s *script) inTx(ctx context.Context, p redis.Pipeliner, ks []string, whole bool, args ...any) *redis.Cmd {
	if whole {
		return s.Eval(ctx, p, guarded(ks), args...)
	}
	return s.evalSha(ctx, p, ks, args...)
}

// script is a Lua script with its name and source, so that an error raised on
// one of its lines can name the Redis command of that line.
type script struct {
	*redis.Script
	name  string
	lines []string
}

// load returns script name with what it uses of prelude.lua in front
// of it.
func load(name string) *script {
	body := source(name)
	src := preludeFor(body) + body
	s := &script{Script: redis.NewScript(src), name: name, lines: strings.Split(src, "\n")}
	loaded = append(loaded, s)
	return s
}

// preludeDef is one top-level definition of prelude.lua ("local NAME = ..."
// or "local function NAME(...) ... end"), with the comment above it.
type preludeDef struct {
	name, text string
	uses       []string // the other definitions its text names
}

// preludeDefs are prelude.lua's definitions in order, after its header.
var preludeHeader, preludeDefs = splitPrelude(source("prelude.lua"))

// splitPrelude cuts prelude src into its header (the comment before the
// first definition) and its definitions. A definition runs from the comment
// above it to its line (a value) or to the first line "end" after it (a
// function).
func splitPrelude(src string) (header string, defs []preludeDef) {
	lines := strings.SplitAfter(src, "\n")
	start, inFunc := 0, false
	var name string
	for i, l := range lines {
		switch {
		case inFunc && strings.TrimRight(l, "\n") == "end":
			defs = append(defs, preludeDef{name: name, text: strings.Join(lines[start:i+1], "")})
			start, inFunc = i+1, false
		case !inFunc && strings.HasPrefix(l, "local function "):
			name = strings.TrimPrefix(l, "local function ")
			name, inFunc = name[:strings.IndexByte(name, '(')], true
		case !inFunc && strings.HasPrefix(l, "local "):
			name = strings.Fields(l)[1]
			defs = append(defs, preludeDef{name: name, text: strings.Join(lines[start:i+1], "")})
			start = i + 1
		case !inFunc && len(defs) == 0 && strings.TrimSpace(l) == "":
			header, start = strings.Join(lines[:i+1], ""), i+1
		}
	}
	for i := range defs {
		code := uncommented(defs[i].text)
		for _, d := range defs[:i] {
			if names(code, d.name) {
				defs[i].uses = append(defs[i].uses, d.name)
			}
		}
	}
	return header, defs
}

// uncommented returns Lua source src without its comments ("--" to the end
// of a line: no script has "--" inside a string, nor a long comment).
func uncommented(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// names reports whether Lua source src names identifier id.
func names(src, id string) bool {
	for i := 0; ; {
		j := strings.Index(src[i:], id)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(id)
		if (j == 0 || !identByte(src[j-1])) && (end == len(src) || !identByte(src[end])) {
			return true
		}
		i = end
	}
}

func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// preludeFor returns the prelude a script of body needs: its header and
// the definitions body names, with those they name, in the prelude's order.
// Each definition is a closure made at every call of the script, so a
// script that carried all 40-odd of them paid some 4.6 µs of Redis CPU a
// call for functions it never called.
func preludeFor(body string) string {
	need := map[string]bool{}
	code := uncommented(body)
	for i := len(preludeDefs) - 1; i >= 0; i-- {
		d := preludeDefs[i]
		if need[d.name] || names(code, d.name) {
			need[d.name] = true
			for _, u := range d.uses {
				need[u] = true
			}
		}
	}
	var b strings.Builder
	b.WriteString(preludeHeader)
	for _, d := range preludeDefs {
		if need[d.name] {
			b.WriteString(d.text)
		}
	}
	return b.String()
}

// loaded is every script load made, in the order of the var block above
// (package initialisation runs it before anything else can read loaded).
var loaded []*script

func source(name string) string {
	b, err := lua.ReadFile(name)
	if err != nil {
		panic("rdb: missing script " + name) // embedded at build time: cannot happen
	}
	return string(b)
}
