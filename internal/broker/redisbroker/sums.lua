-- sums.lua: record the sums of a durable batch's tasks' inputs as first
-- submitted, for its owner, unless the owner's claim is no longer the
-- batch's fence (another manager took the batch over: see keys.Fence).
-- KEYS[1] the batch's sums (HASH task id -> sum; keys.Sums)
-- KEYS[2] the batch's fence (keys.Fence)
-- ARGV[1] the claim the owner holds (redisbroker.Fence)   ARGV[2] the sums' TTL, ms
-- ARGV[3], ARGV[4], ...: task id, sum, ...
-- A key holding foreign data is set aside (set_aside).
-- Returns nothing; the error "FENCED <the fence>" if fenced.
local fence = fence_check(KEYS[2], ARGV[1])
if fence then
  return redis.error_reply('FENCED ' .. fence)
end
for i = 3, #ARGV, 2 * CHUNK do
  guarded('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 2 * CHUNK - 1, #ARGV)))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
