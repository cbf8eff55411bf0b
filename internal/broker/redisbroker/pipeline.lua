-- pipeline.lua: write or delete a durable pipeline's record for its holder,
-- unless the holder's claim is no longer the pipeline's fence (another
-- manager took the pipeline over: see keys.Fence).
-- KEYS[1] the pipeline's record (STRING; keys.Pipeline)
-- KEYS[2] the pipeline's fence (keys.Fence)
-- ARGV[1] the claim the holder holds (redisbroker.Fence)
-- ARGV[2] the record's TTL, ms   ARGV[3] the record, or "" to delete it
-- A record over foreign data replaces it (SET writes over any type).
-- Returns 0; the error "FENCED <the fence>" if fenced.
local fence = fence_check(KEYS[2], ARGV[1])
if fence then
  return redis.error_reply('FENCED ' .. fence)
end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
end
return 0
