-- purge.lua: drop every queued task of a queue, telling each task's manager
-- ("purged <task id>" in place of a result), so no batch waits for ever.
-- Tasks already held by workers are left to finish.
-- KEYS[1] ring of the default priority   ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] how many rings follow   ARGV[3], ...: the other rings of the queue,
-- then its workers' private lists; every lane of a ring is purged, and the
-- ring with it
-- Ids of tasks no manager wants any more (their batch cancelled, their
-- manager gone) are dropped too, and counted apart.
-- Returns {tasks purged from their batches, ids dropped in all}.
local base = ARGV[1]
local n, ids = 0, 0
local function purge(list)
  for _, tid in ipairs(redis.call('LRANGE', list, 0, -1)) do
    ids = ids + 1
    if wanted(base, tid) then
      fail(manager(base, tid), tid, purged_entry(tid))
      n = n + 1
    end
  end
  redis.call('DEL', list)
  unlane(list)
end
local function purge_ring(ring)
  for _, lane in ipairs(redis.call('LRANGE', ring, 0, -1)) do
    purge(base .. 'l:' .. lane)
  end
  redis.call('DEL', ring)
end
local rings = tonumber(ARGV[2])
purge_ring(KEYS[1])
for i = 3, 2 + rings do
  purge_ring(ARGV[i])
end
for i = 3 + rings, #ARGV do
  purge(ARGV[i])
end
return {n, ids}
