-- wake.lua: end a durable batch's owner's wait for a result (WaitResults, a
-- blocking BLMOVE of its result list) as the owner stops: a wake entry at
-- the end of the list, which every collector drops; unless the owner's claim
-- is no longer the batch's fence. The list keeps its TTL: it may hold
-- results that the batch's next holder reads (a manager's wake gives its
-- list a minute, as Broker.push does); a list the wake makes lives no longer
-- than the owner's task set (its DurableTTL, so that nothing of an orphan
-- outlives it), a minute if the set is gone.
-- KEYS[1] the owner's result list   KEYS[2] the batch's fence (keys.Fence)
-- KEYS[3] the owner's task set
-- ARGV[1] the claim the owner holds (redisbroker.Fence)   ARGV[2] the wake entry
-- A list holding foreign data is set aside (guarded).
-- Returns 1; the error "FENCED <the fence>" if fenced.
local fence = fence_check(KEYS[2], ARGV[1])
if fence then
  return redis.error_reply('FENCED ' .. fence)
end
guarded('RPUSH', KEYS[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) == -1 then
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl <= 0 or ttl > tonumber(BELL_TTL) then
    ttl = BELL_TTL
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
