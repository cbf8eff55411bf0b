-- reap.lua: give the tasks of workers whose lease expired back to the queue.
-- Whoever runs it first (a waiting manager or any live worker) reaps; running
-- it again finds nothing. Deadlines are compared on the Redis clock.
-- A public task a dead worker held goes to the front of its lane (and the
-- lane back in its ring) with its lost-attempt count raised (the worker that takes it next checks the
-- count against the batch's budget). A private task, held or still queued,
-- cannot run elsewhere: its manager gets a "lost <task id> <worker id>" entry
-- in place of a result. Each returns its slot of its function's
-- concurrency cap (unhold_limited): a dead worker's slots come back within
-- its lease.
-- A reaped worker that has an info hash here (shard 0) is listed gone for
-- operators, with its last info: "stopped" if it retired itself (see
-- heartbeat.lua), else "dead" (its lease lapsed).
-- KEYS[1] workers sorted set (wid -> lease deadline, ms)
-- KEYS[2] ring of the default priority (names the slot)
-- KEYS[3] idle set   KEYS[4] gone sorted set (wid -> when, ms)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] most workers to reap in one call
-- ARGV[3] how long a gone worker stays listed, ms
-- Returns {workers reaped, tasks re-queued, private tasks lost}.
local base, gone_for = ARGV[1], tonumber(ARGV[3])
local t = now()
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[2]))
local requeued, lost = 0, 0

local function lose(tid, wid)
  if wanted(base, tid) then
    fail(manager(base, tid), tid, lost_entry(tid, wid))
    lost = lost + 1
  end
end

for _, wid in ipairs(dead) do
  local w = base .. 'w:' .. wid
  for _, member in ipairs(redis.call('SMEMBERS', w .. ':held')) do
    unhold_limited(base, (string.gsub(member, '^!', '')))
    if string.sub(member, 1, 1) == '!' then
      lose(string.sub(member, 2), wid)
    else
      if wanted(base, member) then
        local m = manager(base, member)
        redis.call('HINCRBY', m .. ':attempts', member, 1)
        redis.call('PEXPIRE', m .. ':attempts', math.max(redis.call('PTTL', m .. ':tasks'), 1000))
        requeue(base, member)
        requeued = requeued + 1
      end
    end
  end
  for _, tid in ipairs(redis.call('LRANGE', w .. ':private', 0, -1)) do
    lose(tid, wid)
  end
  redis.call('DEL', w .. ':held', w .. ':private', w .. ':bell', w .. ':drain')
  local state = redis.call('HGET', w .. ':info', 'state')
  if state then
    if state ~= 'stopped' then
      redis.call('HSET', w .. ':info', 'state', 'dead')
    end
    redis.call('HSET', w .. ':info', 'gone', t)
    redis.call('PEXPIRE', w .. ':info', gone_for)
    redis.call('ZADD', KEYS[4], t, wid)
  end
  redis.call('ZREM', KEYS[1], wid)
  redis.call('SREM', KEYS[3], wid)
end

if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', t - gone_for)
  redis.call('PEXPIRE', KEYS[4], gone_for)
end

if requeued > 0 then
  for _, w in ipairs(redis.call('SPOP', KEYS[3], requeued)) do
    ring_worker(base, w)
  end
end
return {#dead, requeued, lost}
