-- submit.lua: store task payloads in the manager's task set, queue their ids,
-- then wake idle workers.
-- The payloads are written before the ids are queued, so a worker that pops an
-- id always finds its payload. The task set carries the marker field "_", so
-- its disappearance tells the manager that Redis lost its data.
-- KEYS[1] task set of the manager (HASH task id -> payload)
-- KEYS[2] list to queue on: the public list, or one worker's private list
-- KEYS[3] idle set of the queue
-- KEYS[4] result list of the manager
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] TTL of the manager's keys, ms
-- ARGV[3] the worker id of the private list, or "" for the public list
-- ARGV[4], ARGV[5], ...: task id, payload, task id, payload, ...
-- Returns the number of tasks queued.
local base, ttl, wid = ARGV[1], ARGV[2], ARGV[3]
-- unpack in slices: Lua's stack holds a few thousand values at most.
for i = 4, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '_', '1')
local ids = {}
for i = 4, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
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
return #ids
