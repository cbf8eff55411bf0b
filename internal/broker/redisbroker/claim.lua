-- claim.lua: claim a durable batch for a manager, renew its claim, or
-- release it. A claim held by another manager is left alone, unless it is
-- exactly ARGV[4] (a holder the caller found gone); one that does not decode
-- is taken over (a claim is a lease: nothing is lost with it). A claim taken
-- numbers itself one more than the batch's last (its token) and becomes the
-- batch's fence, which every write of its holder then carries (see
-- keys.Fence). A holder renewing or releasing (ARGV[8]) is refused once the
-- fence is another claim's: another manager took the batch since, even if
-- its own lease had not lapsed by its clock. A claim taken or renewed also
-- renews the batch's entry in the queue's list of durable batches: it
-- expires ARGV[6] ms from now unless a manager holds it again.
-- KEYS[1] the batch's claim (STRING: JSON wire.Holder; keys.Claim)
-- KEYS[2] the queue's durable batches (HASH owner -> JSON wire.DurableEntry)
-- KEYS[3] the batch's fence (STRING: the last claim taken; keys.Fence)
-- ARGV[1] the claiming manager's id   ARGV[2] its record (JSON wire.Holder,
-- no token: the token is appended to it as its last field)
-- ARGV[3] the lease, ms; 0 releases the manager's claim
-- ARGV[4] another holder's record to take over, or ""
-- ARGV[5] the batch's owner id   ARGV[6] DurableTTL, ms   ARGV[7] its name
-- ARGV[8] the claim as the caller took it (what this script returned), to
-- renew or release it; "" to take the claim
-- A key holding foreign data is set aside (set_aside): a claim is a lease,
-- the list of durable batches is written again by each claim's renewal.
-- Returns {1, the record now} if the manager holds the claim (or, releasing,
-- no longer does), else {0, the holder's record}; the error "FENCED <the
-- fence>" if ARGV[8] is no longer the batch's fence.
local cur = guarded('GET', KEYS[1])
local lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[6])
local fence = fence_read(KEYS[3])
local function hold(rec)
  redis.call('SET', KEYS[1], rec, 'PX', lease)
  redis.call('SET', KEYS[3], rec, 'PX', ttl)
  guarded('HSET', KEYS[2], ARGV[5], cjson.encode({name = ARGV[7], expires_ms = now() + ttl}))
  return {1, rec}
end
if ARGV[8] ~= '' then
  -- Its lease may have lapsed meanwhile: while no other claim was taken,
  -- the batch is still its own. A fence Redis lost is set again.
  local by = fence_check(KEYS[3], ARGV[8])
  if by then
    return redis.error_reply('FENCED ' .. by)
  end
  if lease == 0 then
    if cur == ARGV[8] then
      redis.call('DEL', KEYS[1])
    end
    return {1, ''}
  end
  return hold(ARGV[8])
end
if cur then
  local ok, h = pcall(cjson.decode, cur)
  if ok and type(h) == 'table' and h.manager ~= ARGV[1] and cur ~= ARGV[4] then
    return {0, cur}
  end
end
if lease == 0 then
  return {1, ''} -- it took no claim: it has none to release
end
local token = 1
if fence then
  local ok, h = pcall(cjson.decode, fence)
  if ok and type(h) == 'table' and tonumber(h.token) then
    token = tonumber(h.token) + 1
  end
end
return hold(string.sub(ARGV[2], 1, -2) .. ',"token":' .. string.format('%d', token) .. '}')
