-- resume.lua: what a manager taking over a durable batch finds of it on one
-- shard, in one step: the results not yet read join the kept ones (so that
-- the kept list holds, in order, every result and notice delivered so far,
-- and the result list only what comes next), and the task set's outstanding
-- tasks (queued, or held by a worker) are listed with its count and epoch.
-- KEYS[1] task set of the owner   KEYS[2] its result list   KEYS[3] its kept list
-- KEYS[4] its mark of an operator's cancel (keys.Cancelled)
-- KEYS[5] the batch's fence (keys.Fence; only with ARGV[1] set)
-- ARGV[1] the claim the manager took (redisbroker.Fence), or "": it becomes the
-- shard's fence, which refuses any write of a holder before it from now on
-- ARGV[2] how long the fence lives, ms (DurableTTL)
-- A key holding foreign data is set aside (set_aside), but the task set:
-- the call fails (redisbroker names the key), and its manager fails its tasks and
-- sets it aside.
-- Returns {the count ("_", 0 if none), the epoch ("_e", "" if none), the
-- length of the kept list, why an operator cancelled it ("" if none), the
-- outstanding task ids...}.
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[2])
end
local n = guarded('LLEN', KEYS[2])
for i = 0, n - 1, CHUNK do
  guarded('RPUSH', KEYS[3], unpack(redis.call('LRANGE', KEYS[2], i, math.min(i + CHUNK, n) - 1)))
end
if n > 0 then
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
  redis.call('DEL', KEYS[2])
end
local out = {tonumber(redis.call('HGET', KEYS[1], '_') or '0') or 0, redis.call('HGET', KEYS[1], '_e') or '',
  guarded('LLEN', KEYS[3]), guarded('GET', KEYS[4]) or ''}
-- The set holds one batch's window at most (4,096 tasks): HKEYS is bounded.
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f ~= '_' and f ~= '_e' then
    out[#out + 1] = f
  end
end
return out
