-- finish.lua: deliver the results of tasks that are still wanted; drop the rest.
-- A result is delivered only if its task is still in its manager's task set,
-- and delivering removes it from the set, so the first result of a task is
-- delivered and every later one (a duplicate, a zombie's, a cancelled task's)
-- is discarded: a manager never sees a stale or duplicate result.
-- KEYS[1] held set of the worker
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] TTL for a result list whose task set is gone (its last task just finished), ms
-- ARGV[3], ARGV[4], ...: task id, encoded result, task id, encoded result, ...
-- Returns the number of results delivered.
local base, ttl = ARGV[1], ARGV[2]
local delivered = 0
local touched = {}
for i = 3, #ARGV, 2 do
  local tid = ARGV[i]
  redis.call('SREM', KEYS[1], tid)
  redis.call('DEL', base .. 't:' .. tid)
  local mid = string.match(tid, '^([^-]+)-')
  if mid and redis.call('HDEL', base .. 'm:' .. mid .. ':tasks', tid) == 1 then
    local results = base .. 'm:' .. mid .. ':results'
    redis.call('RPUSH', results, ARGV[i + 1])
    touched[results] = base .. 'm:' .. mid .. ':tasks'
    delivered = delivered + 1
  end
end
-- A result list lives as long as its manager's task set, which the manager
-- renews while it lives: a dead manager's results expire with it.
for results, tasks in pairs(touched) do
  local left = redis.call('PTTL', tasks)
  redis.call('PEXPIRE', results, left > 0 and left or ttl)
end
return delivered
