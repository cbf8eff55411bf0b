-- finish.lua: deliver the results of tasks that are still wanted; drop the rest.
-- A result is delivered only if its task is still in its manager's task set,
-- and delivering removes it from the set, so the first result of a task is
-- delivered and every later one (a duplicate, a zombie's, a cancelled task's)
-- is discarded: a manager never sees a stale or duplicate result.
-- The result is pushed before the task leaves the set, so a write refused
-- half-way (Redis out of memory) leaves the task outstanding, not lost.
-- KEYS[1] held set of the worker
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2], ARGV[3], ...: task id, encoded result, task id, encoded result, ...
-- Returns the number of results delivered.
local base = ARGV[1]
local delivered = 0
local touched = {}
for i = 2, #ARGV, 2 do
  local tid = ARGV[i]
  redis.call('SREM', KEYS[1], tid, '!' .. tid)
  local mid = string.match(tid, '^([^-]+)-')
  local m = mid and base .. 'm:' .. mid
  if m and redis.call('HEXISTS', m .. ':tasks', tid) == 1 then
    redis.call('RPUSH', m .. ':results', ARGV[i + 1])
    redis.call('HDEL', m .. ':tasks', tid)
    redis.call('HDEL', m .. ':attempts', tid)
    touched[m] = true
    delivered = delivered + 1
  end
end
-- A result list lives as long as its manager's task set, which the manager
-- renews while it lives; and the manager is woken if it waits.
for m in pairs(touched) do
  local ttl = redis.call('PTTL', m .. ':tasks')
  if ttl > 0 then
    redis.call('PEXPIRE', m .. ':results', ttl)
  end
  if redis.call('LLEN', m .. ':bell') == 0 then
    redis.call('RPUSH', m .. ':bell', '1')
    redis.call('PEXPIRE', m .. ':bell', 60000)
  end
end
return delivered
