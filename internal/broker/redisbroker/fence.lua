-- fence.lua: the first step of a durable batch's owner's submit (RDB.Submit),
-- in its MULTI before the plain HSET of the payloads: if the owner's claim is
-- no longer the batch's fence, put aside what the task set holds of the ids
-- submitted (and its TTL), so that submit.lua, refusing the submit, puts the
-- set back as it was: a fenced submit stores nothing. A set aside already
-- (this MULTI's first try met NOSCRIPT after it) is the one kept. It is sent
-- whole (EVAL): it is short, and no NOSCRIPT can leave the HSET alone.
-- KEYS[1] the batch's fence (keys.Fence)   KEYS[2] the task set
-- KEYS[3] where its payloads wait (keys.Aside)
-- ARGV[1] the claim the owner holds (redisbroker.Fence)   ARGV[2..] the task ids
-- A fence of an older claim is set back to the owner's (fence_check); one
-- holding foreign data is set aside (fence_read); a task set holding
-- it is left to its owner, which fails the batch naming it.
-- Returns 1 if fenced, 0 if not.
if not fence_check(KEYS[1], ARGV[1]) then
  return 0
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 1
end
local kept = {'_ttl', redis.call('PTTL', KEYS[2])}
for i = 2, #ARGV do
  local p = unless_foreign('HGET', KEYS[2], ARGV[i])
  if p then
    kept[#kept + 1] = ARGV[i]
    kept[#kept + 1] = p
  end
end
redis.call('HSET', KEYS[3], unpack(kept))
redis.call('PEXPIRE', KEYS[3], BELL_TTL) -- gone within the MULTI; a minute at worst
return 1
