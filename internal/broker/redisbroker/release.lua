-- release.lua: drop a hold on a cached object; delete the object when no live
-- holder is left. Expired holds are pruned first, by the Redis clock, so a
-- holder that died does not keep the object alive. Adding a hold (hold.lua,
-- alone, or as the last step of an upload) and this are atomic, so a held
-- object is never deleted.
-- KEYS[1] object metadata (HASH size, parts)   KEYS[2] holders (ZSET holder -> deadline, ms)
-- ARGV[1] holder
-- A key holding foreign data is set aside (set_aside).
-- Returns 1 if the object was deleted, 0 if other holders keep it.
guarded('ZREM', KEYS[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now())
local parts = tonumber(guarded('HGET', KEYS[1], 'parts')) or 0
if redis.call('ZCARD', KEYS[2]) > 0 then
  local last = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
  expire_object(KEYS[1], KEYS[2], parts, last)
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
for i = 0, parts - 1 do
  redis.call('DEL', KEYS[1] .. ':p:' .. i)
end
return 1
