-- lost.lua: record the batches of managers that stopped publishing progress
-- (killed, or cut off from Redis for longer than their publish was due) in
-- the queue's history as "manager lost", with their last published
-- progress; and the durable batches no manager took over before they
-- expired as "expired". Whoever notices runs it (a worker's heartbeat, the
-- CLI, the dashboard); running it again finds nothing. A manager that comes
-- back overwrites the record with its own when the batch ends.
-- Each call records at most BUDGET batches (lose_managers): its caller
-- calls again while it says work is left. The call that finds a manager
-- lost also deletes its lanes, a few commands a lane (withdraw_manager).
-- The durable batches are read whole, one HGET each.
-- KEYS[1] managers sorted set (mid -> next publish due, Redis ms)
-- KEYS[2] history hash   KEYS[3] history index
-- KEYS[4] durable batches (HASH owner -> JSON wire.DurableEntry)
-- KEYS[5] the managers found lost whose batches are being recorded (SET,
-- keys.Losing)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] most batches kept
-- ARGV[3] oldest kept, ms
-- A key holding foreign data is set aside (set_aside).
-- Returns the number of batches recorded, 1 if work is left for another
-- call (else 0), then the ids of the managers found lost, whose tasks it
-- withdrew from this shard (the caller withdraws them from the queue's
-- other shards: withdraw.lua).
local base, limit, age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n, withdrawn, more = lose_managers(base, KEYS[1], KEYS[5], KEYS[2], KEYS[3], limit, age)
local t = now()
local expired = 0
local ids, recs = {}, {}
-- HKEYS, then an HGET each: the least-privilege ACL user has no HGETALL.
for _, owner in ipairs(guarded('HKEYS', KEYS[4])) do
  local ok, e = pcall(cjson.decode, redis.call('HGET', KEYS[4], owner) or '')
  if not ok or type(e) ~= 'table' or type(e.expires_ms) ~= 'number' then
    redis.call('HDEL', KEYS[4], owner) -- unreadable: nothing to record it by
  elseif e.expires_ms < t then
    local id = owner .. ':1'
    local rec = {id = id, manager = owner, outcome = 'expired',
      reason = 'durable batch ' .. tostring(e.name) .. ': no manager took it over before it expired (DurableTTL)',
      ended_ms = t}
    with_progress(rec, guarded('HGET', base .. 'm:' .. owner .. ':batches', id))
    ids[#ids + 1], recs[#recs + 1] = id, cjson.encode(rec)
    redis.call('HDEL', KEYS[4], owner)
    redis.call('UNLINK', base .. 'm:' .. owner .. ':batches')
    expired = expired + 1
  end
end
if expired > 0 then
  write_histories(base, KEYS[2], KEYS[3], ids, recs, {}, t)
  trim_history(KEYS[2], KEYS[3], limit, age, t)
end
local out = {n + expired, more and 1 or 0}
for _, mid in ipairs(withdrawn) do
  out[#out + 1] = mid
end
return out
