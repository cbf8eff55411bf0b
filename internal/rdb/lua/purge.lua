-- purge.lua: drop every queued task of a queue, telling each task's manager
-- ("purged <task id>" in place of a result), so no batch waits for ever.
-- Tasks already held by workers are left to finish.
-- KEYS[1] public list   ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2], ...: the other lists of the queue: its public lists of other
-- priorities and its workers' private lists
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
end
purge(KEYS[1])
for i = 2, #ARGV do
  purge(ARGV[i])
end
return {n, ids}
