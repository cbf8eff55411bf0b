-- claim.lua: claim a durable batch for a manager, renew its claim, or
-- release it. A claim held by another manager is left alone, unless it is
-- exactly ARGV[4] (a holder the caller found gone); one that does not decode
-- is taken over (a claim is a lease: nothing is lost with it). A claim taken
-- or renewed also renews the batch's entry in the queue's list of durable
-- batches: it expires ARGV[6] ms from now unless a manager holds it again.
-- KEYS[1] the batch's claim (STRING: JSON wire.Holder; keys.Claim)
-- KEYS[2] the queue's durable batches (HASH owner -> JSON wire.DurableEntry)
-- ARGV[1] the claiming manager's id   ARGV[2] its record (JSON wire.Holder)
-- ARGV[3] the lease, ms; 0 releases the manager's claim
-- ARGV[4] another holder's record to take over, or ""
-- ARGV[5] the batch's owner id   ARGV[6] DurableTTL, ms   ARGV[7] its name
-- Returns {1, the record now} if the manager holds the claim (or, releasing,
-- no longer does), else {0, the holder's record}.
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, h = pcall(cjson.decode, cur)
  if ok and type(h) == 'table' and h.manager ~= ARGV[1] and cur ~= ARGV[4] then
    return {0, cur}
  end
end
if tonumber(ARGV[3]) == 0 then
  if cur then
    redis.call('DEL', KEYS[1])
  end
  return {1, ''}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[5], cjson.encode({name = ARGV[7], expires_ms = now() + tonumber(ARGV[6])}))
return {1, ARGV[2]}
