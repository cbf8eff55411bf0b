-- publish.lua: publish a manager's running batches for operators, replacing
-- what it published last; say when its next publish is due (a manager
-- overdue is lost: see lost.lua); count the elements ended since the last
-- call in the queue's throughput; and take the batch ids an operator asked
-- it to cancel.
-- A call takes at most BUDGET batches: a manager running more builds its
-- next batches hash in KEYS[5] over several calls ("first", "more"), and
-- the call of the last slice ("last") puts it in place at once (RENAME);
-- the old one is freed beside Redis's thread (UNLINK).
-- KEYS[1] the manager's batches hash   KEYS[2] its cancel set
-- KEYS[3] the queue's managers sorted set (mid -> next publish due, Redis ms)
-- KEYS[4] the throughput counter of now
-- KEYS[5] the batches hash being built (keys.BatchesNext)
-- KEYS[6] a durable batch's fence (keys.Fence; only with ARGV[7] set)
-- ARGV[1] manager id   ARGV[2] how long the batches hash outlives the due time, ms
-- ARGV[3] the next publish is due within this, ms   ARGV[4] elements ended
-- ARGV[5] throughput counter's life, ms
-- ARGV[6] "whole" (all the batches), "first", "more" or "last" (a slice)
-- ARGV[7] the claim a durable batch's owner holds (redisbroker.Fence), or "": an
-- owner whose claim is no longer the fence publishes nothing, and takes no
-- cancel meant for the batch's holder
-- ARGV[8], ARGV[9], ...: batch id, JSON progress, ... (may be none; at
-- most BUDGET batches)
-- A key holding foreign data is set aside (set_aside).
-- Returns the batch ids an operator asked to cancel ("first" and "more":
-- none); the error "FENCED <the fence>" if fenced.
local mode = ARGV[6]
if ARGV[7] ~= '' then
  local fence = fence_check(KEYS[6], ARGV[7])
  if fence then
    return redis.error_reply('FENCED ' .. fence)
  end
end
if (#ARGV - 7) / 2 > BUDGET then
  return redis.error_reply('publish.lua: more than ' .. BUDGET .. ' batches in one call')
end
local live = tonumber(ARGV[2]) + math.max(tonumber(ARGV[3]), 0)
local into = KEYS[1]
if mode == 'whole' then
  redis.call('UNLINK', KEYS[1])
elseif mode == 'last' and redis.call('EXISTS', KEYS[5]) == 0 then
  -- a retry of a last call whose reply was lost: the hash it put in place
  -- is there, with this slice; writing it again changes nothing
  into = KEYS[1]
else
  into = KEYS[5]
  if mode == 'first' then
    redis.call('UNLINK', into)
  end
end
if #ARGV > 7 then
  for i = 8, #ARGV, 2 * CHUNK do
    guarded('HSET', into, unpack(ARGV, i, math.min(i + 2 * CHUNK - 1, #ARGV)))
  end
  -- outliving the due time, so whoever notices the manager is lost still
  -- finds its batches
  redis.call('PEXPIRE', into, live)
end
if mode == 'first' or mode == 'more' then
  return {}
end
if mode == 'last' and into == KEYS[5] then
  redis.call('UNLINK', KEYS[1])
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('RENAME', KEYS[5], KEYS[1])
    redis.call('PEXPIRE', KEYS[1], live)
  end
end
guarded('ZADD', KEYS[3], now() + tonumber(ARGV[3]), ARGV[1])
local ended = tonumber(ARGV[4])
if ended > 0 then
  guarded('INCRBY', KEYS[4], ended)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[5]))
end
local cancels = guarded('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
return cancels
