-- cancel.lua: an operator cancels durable batch owner. The batch is
-- marked cancelled (KEYS[5], the reason: the call that takes it over fails
-- its elements with redmap.ErrCancelled, then its keys go) and its attempt
-- counts go; the caller then withdraws its outstanding tasks from every
-- shard (workers skip them), whoever holds the batch. If a manager holds it
-- (its claim lives), the manager is asked too (its set of cancels, read
-- every Poll: its call ends, and it writes the batch's record); a holder
-- killed before it reads the ask leaves the mark for the next call. If none
-- does, the batch is recorded here, as cancelled, and leaves the queue's
-- list of durable batches. A batch none holds whose tasks have all ended
-- (ARGV[6] "1") is left alone: its results wait for the call that takes it
-- over, and cancelling would discard them (the caller passes "0" when the
-- operator asked for that).
-- KEYS[1] the batch's claim   KEYS[2] its owner's set of cancels
-- KEYS[3] its task set   KEYS[4] its attempt counts   KEYS[5] its mark
-- KEYS[6] the queue's durable batches   KEYS[7] history   KEYS[8] history index
-- KEYS[9] the owner's published progress
-- ARGV[1] the owner id   ARGV[2] the reason   ARGV[3] most batches kept
-- ARGV[4] oldest kept, ms   ARGV[5] how long an asked cancel waits, ms
-- ARGV[6] "1" if the batch's tasks have all ended (and results would be
-- discarded), else "0"
-- A key holding foreign data is set aside (set_aside).
-- Returns "asked" (a manager holds it: marked, and asked), "cancelled",
-- "already" (none holds it, and it was cancelled before), "ended" (none
-- holds it and it has ended: nothing done), or "unknown" (Redis has
-- nothing of it).
local owner, id = ARGV[1], ARGV[1] .. ':1'
local held = redis.call('EXISTS', KEYS[1]) == 1
local entry = guarded('HGET', KEYS[6], owner)
if not held and not entry and redis.call('EXISTS', KEYS[3]) == 0 then
  return 'unknown'
end
if not held and redis.call('EXISTS', KEYS[5]) == 1 then
  return 'already'
end
if not held and ARGV[6] == '1' then
  return 'ended'
end
local ttl = redis.call('PTTL', KEYS[3])
if ttl <= 0 then
  ttl = 86400000
end
redis.call('SET', KEYS[5], ARGV[2], 'PX', ttl)
-- The tasks go after this call (redisbroker.Admin.CancelOwner withdraws them a
-- slice at a time, from every shard): this one does a bounded number of
-- commands however many there are. The set's count and epoch stay: the
-- call that takes the batch over finds its history intact, and fails what
-- it would have submitted; a holder's check for lost data finds nothing lost.
redis.call('UNLINK', KEYS[4])
if held then
  guarded('SADD', KEYS[2], id)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  return 'asked'
end
local t = now()
local rec = {id = id, manager = owner, outcome = 'cancelled', reason = ARGV[2], ended_ms = t}
local ok, e = pcall(cjson.decode, entry or '')
if ok and type(e) == 'table' then
  rec.reason = 'durable batch ' .. tostring(e.name) .. ': ' .. ARGV[2]
end
with_progress(rec, guarded('HGET', KEYS[9], id))
guarded('HSET', KEYS[7], id, cjson.encode(rec))
guarded('ZADD', KEYS[8], t, id)
trim_history(KEYS[7], KEYS[8], tonumber(ARGV[3]), tonumber(ARGV[4]))
redis.call('HDEL', KEYS[6], owner)
redis.call('UNLINK', KEYS[9])
return 'cancelled'
