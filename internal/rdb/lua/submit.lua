-- submit.lua: store task payloads in the manager's task set, queue their ids,
-- then wake idle workers.
-- The payloads are written before the ids are queued, so a worker that pops an
-- id always finds its payload. The task set's field "_" counts the tasks ever
-- submitted to it: it only grows while Redis keeps its data, so a count below
-- what the manager has seen acknowledged tells it that Redis lost writes
-- (a restart, FLUSHALL, a failover that dropped the primary's last writes),
-- even when the set itself survived.
-- KEYS[1] task set of the manager (HASH task id -> payload; "_" -> count)
-- KEYS[2] list to queue on: the public list, or one worker's private list
-- KEYS[3] idle set of the queue
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] TTL of the manager's keys, ms
-- ARGV[3] the worker id of the private list, or "" for the public list
-- ARGV[4] the count the manager expects at least (0: no check)
-- ARGV[5], ARGV[6], ...: task id, payload, task id, payload, ...
-- Returns {the count after this submit; 1 if the count before it was at
-- least ARGV[4], else 0}.
local base, ttl, wid, expect = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local before = tonumber(redis.call('HGET', KEYS[1], '_') or '0') or 0
-- unpack in slices: Lua's stack holds a few thousand values at most.
for i = 5, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local ids = {}
for i = 5, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
local after = redis.call('HINCRBY', KEYS[1], '_', #ids)
for i = 1, #ids, 500 do
  redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 499, #ids)))
end
redis.call('PEXPIRE', KEYS[1], ttl)

local function ring(w)
  local bell = base .. 'w:' .. w .. ':bell'
  redis.call('RPUSH', bell, '1')
  redis.call('PEXPIRE', bell, 60000)
end
if wid == '' then
  local idle = redis.call('SPOP', KEYS[3], #ids)
  for _, w in ipairs(idle) do ring(w) end
else
  redis.call('SREM', KEYS[3], wid)
  ring(wid)
end
return {after, before >= expect and 1 or 0}
