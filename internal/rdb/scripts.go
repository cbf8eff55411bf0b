package rdb

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// lua holds the scripts, one file each, each opening with its contract, and
// prelude.lua, the names they share.
//
//go:embed lua/*.lua
var lua embed.FS

// The scripts, each loaded once with the prelude in front of it and run by SHA.
var (
	submitScript    = load("submit.lua")
	takeScript      = load("take.lua")
	finishScript    = load("finish.lua")
	heartbeatScript = load("heartbeat.lua")
	liveScript      = load("live.lua")
	trimScript      = load("trim.lua")
	missingScript   = load("missing.lua")
	reapScript      = load("reap.lua")
	givebackScript  = load("giveback.lua")
	unwantedScript  = load("unwanted.lua")
	servedScript    = load("served.lua")
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
	claimScript     = load("claim.lua")
	resumeScript    = load("resume.lua")
	cancelScript    = load("cancel.lua")
	limitScript     = load("limit.lua")
	throttleScript  = load("throttle.lua")
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

// script is a Lua script with its name and source, so that an error raised on
// one of its lines can name the Redis command of that line.
type script struct {
	*redis.Script
	name  string
	lines []string
}

// load returns script lua/name with prelude.lua in front of it.
func load(name string) *script {
	src := source("prelude.lua") + source(name)
	s := &script{Script: redis.NewScript(src), name: name, lines: strings.Split(src, "\n")}
	loaded = append(loaded, s)
	return s
}

// loaded is every script load made, in the order of the var block above
// (package initialisation runs it before anything else can read loaded).
var loaded []*script

func source(name string) string {
	b, err := lua.ReadFile("lua/" + name)
	if err != nil {
		panic("rdb: missing script " + name) // embedded at build time: cannot happen
	}
	return string(b)
}
