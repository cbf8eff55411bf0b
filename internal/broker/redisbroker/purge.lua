-- purge.lua: drop the queued tasks of a queue, telling each task's manager
-- ("purged <task id>" in place of a result), so no batch waits for ever.
-- Tasks already held by workers are left to finish.
-- A call drops at most BUDGET task ids and visits at most BUDGET lanes:
-- its caller calls again until it says all are dropped. Each lane it
-- empties leaves its ring, with the keys beside it; a lane it leaves
-- part-way keeps its count of elements right.
-- KEYS[1] ring of the default priority   ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] how many rings follow   ARGV[3], ...: the other rings of the queue,
-- then its workers' private lists; every lane of a ring is purged, and the
-- ring with it
-- Ids of tasks no manager wants any more (their batch cancelled, their
-- manager gone) are dropped too, and counted apart.
-- A key holding foreign data is set aside (set_aside).
-- Returns {tasks purged from their batches, ids dropped in all, 1 if all
-- the lists are empty (else 0)}.
local base = ARGV[1]
local n, ids = 0, 0
local budget = BUDGET
-- purge drops up to budget ids from the head of list, and says whether it
-- emptied it.
local function purge(list)
  local tids = budget > 0 and guarded('LPOP', list, budget) or {}
  if not tids then
    tids = {} -- no such list
  end
  budget = budget - #tids
  local elements = 0
  for _, tid in ipairs(tids) do
    ids = ids + 1
    elements = elements + size_of(tid)
    if wanted(base, tid) then
      fail(manager(base, tid), tid, purged_entry(tid))
      n = n + 1
    end
  end
  if guarded('LLEN', list) == 0 then
    unlane(list)
    return true
  end
  if elements > 0 and redis.call('EXISTS', list .. ':e') == 1 then
    count_elements(list, -elements)
  end
  return false
end
-- purge_ring purges the lanes of ring from its head, each leaving the ring
-- once empty, and says whether it emptied the ring.
local function purge_ring(ring)
  while budget > 0 do
    local lane = guarded('LINDEX', ring, 0)
    if not lane then
      return true
    end
    budget = budget - 1
    if not purge(base .. 'l:' .. lane) then
      return false
    end
    redis.call('LPOP', ring)
  end
  return guarded('LLEN', ring) == 0
end
local rings = tonumber(ARGV[2])
local done = purge_ring(KEYS[1])
for i = 3, 2 + rings do
  done = purge_ring(ARGV[i]) and done
end
for i = 3 + rings, #ARGV do
  done = purge(ARGV[i]) and done
end
return {n, ids, done and 1 or 0}
