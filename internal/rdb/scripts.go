package rdb

import (
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
	readScript      = load("read.lua")
	missingScript   = load("missing.lua")
	reapScript      = load("reap.lua")
	givebackScript  = load("giveback.lua")
	unwantedScript  = load("unwanted.lua")
	servedScript    = load("served.lua")
	holdScript      = load("hold.lua")
	releaseScript   = load("release.lua")
	purgeScript     = load("purge.lua")
	probeScript     = load("probe.lua")
)

// ScriptNames maps each script's SHA-1 to its file name, for tools that read
// EVALSHA calls back from Redis (SLOWLOG, MONITOR).
func ScriptNames() map[string]string {
	out := map[string]string{}
	for _, s := range []*script{submitScript, takeScript, finishScript, heartbeatScript, liveScript,
		readScript, missingScript, reapScript, givebackScript, unwantedScript, servedScript,
		holdScript, releaseScript, purgeScript, probeScript} {
		out[s.Hash()] = s.name
	}
	return out
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
	return &script{Script: redis.NewScript(src), name: name, lines: strings.Split(src, "\n")}
}

func source(name string) string {
	b, err := lua.ReadFile("lua/" + name)
	if err != nil {
		panic("rdb: missing script " + name) // embedded at build time: cannot happen
	}
	return string(b)
}
