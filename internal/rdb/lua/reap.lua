-- reap.lua: give the tasks of workers whose lease expired back to the queue.
-- Whoever runs it first (a waiting manager or any live worker) reaps; running
-- it again finds nothing. Deadlines are compared on the Redis clock.
-- A public task a dead worker held goes to the front of the public list with
-- its lost-attempt count raised (the worker that takes it next checks the
-- count against the batch's budget). A private task, held or still queued,
-- cannot run elsewhere: its manager gets a "lost <task id> <worker id>" entry
-- in place of a result.
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)   KEYS[2] public list
-- KEYS[3] idle set
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] most workers to reap in one call
-- Returns {workers reaped, tasks re-queued, private tasks lost}.
local base = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local requeued, lost = 0, 0

local function manager(tid)
  local mid = string.match(tid, '^([^-]+)-')
  return mid and base .. 'm:' .. mid
end

local function lose(tid, wid)
  local m = manager(tid)
  if m and redis.call('HEXISTS', m .. ':tasks', tid) == 1 then
    redis.call('RPUSH', m .. ':results', 'lost ' .. tid .. ' ' .. wid)
    redis.call('PEXPIRE', m .. ':results', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
    redis.call('HDEL', m .. ':tasks', tid)
    redis.call('HDEL', m .. ':attempts', tid)
    if redis.call('LLEN', m .. ':bell') == 0 then
      redis.call('RPUSH', m .. ':bell', '1')
      redis.call('PEXPIRE', m .. ':bell', 60000)
    end
    lost = lost + 1
  end
end

for _, wid in ipairs(dead) do
  local w = base .. 'w:' .. wid
  for _, member in ipairs(redis.call('SMEMBERS', w .. ':held')) do
    if string.sub(member, 1, 1) == '!' then
      lose(string.sub(member, 2), wid)
    else
      local m = manager(member)
      if m and redis.call('HEXISTS', m .. ':tasks', member) == 1 then
        redis.call('HINCRBY', m .. ':attempts', member, 1)
        redis.call('PEXPIRE', m .. ':attempts', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
        redis.call('LPUSH', KEYS[2], member)
        requeued = requeued + 1
      end
    end
  end
  for _, tid in ipairs(redis.call('LRANGE', w .. ':private', 0, -1)) do
    lose(tid, wid)
  end
  redis.call('DEL', w .. ':held', w .. ':private', w .. ':bell', w .. ':info', w .. ':drain')
  redis.call('ZREM', KEYS[1], wid)
  redis.call('SREM', KEYS[3], wid)
end

if requeued > 0 then
  for _, w in ipairs(redis.call('SPOP', KEYS[3], requeued)) do
    local bell = base .. 'w:' .. w .. ':bell'
    redis.call('RPUSH', bell, '1')
    redis.call('PEXPIRE', bell, 60000)
  end
end
return {#dead, requeued, lost}
