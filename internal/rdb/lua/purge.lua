-- purge.lua: drop every queued task of a queue, telling each task's manager
-- ("purged <task id>" in place of a result), so no batch waits for ever.
-- Tasks already held by workers are left to finish.
-- KEYS[1] public list   ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2], ...: private lists of the queue's workers
-- Returns the number of tasks purged.
local base = ARGV[1]
local n = 0
local function purge(list)
  for _, tid in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local mid = string.match(tid, '^([^-]+)-')
    local m = mid and base .. 'm:' .. mid
    if m and redis.call('HEXISTS', m .. ':tasks', tid) == 1 then
      redis.call('RPUSH', m .. ':results', 'purged ' .. tid)
      redis.call('HDEL', m .. ':tasks', tid)
      redis.call('HDEL', m .. ':attempts', tid)
      if redis.call('LLEN', m .. ':bell') == 0 then
        redis.call('RPUSH', m .. ':bell', '1')
        redis.call('PEXPIRE', m .. ':bell', 60000)
      end
      n = n + 1
    end
  end
  redis.call('DEL', list)
end
purge(KEYS[1])
for i = 2, #ARGV do
  purge(ARGV[i])
end
return n
