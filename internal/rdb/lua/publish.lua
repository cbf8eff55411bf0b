-- publish.lua: publish a manager's running batches for operators, replacing
-- what it published last; say when its next publish is due (a manager
-- overdue is lost: see lost.lua); count the elements ended since the last
-- call in the queue's throughput; and take the batch ids an operator asked
-- it to cancel.
-- KEYS[1] the manager's batches hash   KEYS[2] its cancel set
-- KEYS[3] the queue's managers sorted set (mid -> next publish due, Redis ms)
-- KEYS[4] the throughput counter of now
-- ARGV[1] manager id   ARGV[2] how long the batches hash outlives the due time, ms
-- ARGV[3] the next publish is due within this, ms   ARGV[4] elements ended
-- ARGV[5] throughput counter's life, ms
-- ARGV[6], ARGV[7], ...: batch id, JSON progress, ... (may be none)
-- Returns the batch ids an operator asked to cancel.
-- Fields go in HSETs of at most 1,000 pairs: unpack gives at most about
-- 8,000 values to a call, and a manager may run 100,000 batches.
local PAIRS = 1000
redis.call('DEL', KEYS[1])
if #ARGV > 5 then
  for i = 6, #ARGV, 2 * PAIRS do
    redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 2 * PAIRS - 1, #ARGV)))
  end
  -- outliving the due time, so whoever notices the manager is lost still
  -- finds its batches
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + math.max(tonumber(ARGV[3]), 0))
end
redis.call('ZADD', KEYS[3], now() + tonumber(ARGV[3]), ARGV[1])
local ended = tonumber(ARGV[4])
if ended > 0 then
  redis.call('INCRBY', KEYS[4], ended)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[5]))
end
local cancels = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
return cancels
