-- renew.lua: extend the life of a manager's keys, its lanes included, or
-- delete them all (Drop).
-- KEYS[1] task set   KEYS[2] attempt counts   KEYS[3] result list
-- KEYS[4] lanes of the manager (HASH lane -> what it calls)
-- KEYS[5] kept results, KEYS[6] sums of inputs (a durable batch's owner
-- only: keys.Kept, keys.Sums)   KEYS[7] staged results (keys.Staged)
-- KEYS[8] the length of its widest payload (keys.Widest)
-- KEYS[9] a durable batch's fence (keys.Fence; only with ARGV[4])
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] the manager's id
-- ARGV[3] the TTL, ms; 0 deletes the keys instead
-- ARGV[4] the claim a durable batch's owner holds (redisbroker.Fence), or "": an
-- owner whose claim is no longer the fence renews and deletes nothing; one
-- whose claim is renews the fence with its keys (sets it again if Redis
-- lost it), and leaves it when it deletes them
-- A lanes hash holding foreign data is set aside (set_aside): the audit puts
-- its lanes back.
-- Returns nothing; the error "FENCED <the fence>" if fenced.
local base, mid, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if ARGV[4] and ARGV[4] ~= '' then
  local fence = fence_check(KEYS[9], ARGV[4])
  if fence then
    return redis.error_reply('FENCED ' .. fence)
  end
  if ttl > 0 then
    redis.call('SET', KEYS[9], ARGV[4], 'PX', ttl)
  end
end
local ks = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}
for _, lane in ipairs(guarded('HKEYS', KEYS[4])) do
  local list = base .. 'l:' .. mid .. '.' .. lane
  ks[#ks + 1] = list
  ks[#ks + 1] = list .. ':e' -- the keys beside it (see unlane)
  ks[#ks + 1] = list .. ':t'
end
for _, k in ipairs(ks) do
  if ttl > 0 then
    redis.call('PEXPIRE', k, ttl)
  else
    redis.call('DEL', k)
  end
end
return 0
