-- cancel.lua: an operator cancels durable batch owner. If a manager holds
-- it, the manager is asked to (its set of cancels, read every Poll: it
-- withdraws the batch's tasks and ends it). If none does, the batch is
-- cancelled here: a mark says why for the call that takes it over (its elements fail with
-- redmap.ErrCancelled, then its keys go), the history records it as
-- cancelled, and it leaves the queue's list of durable batches; the caller
-- then withdraws its outstanding tasks (workers skip them).
-- KEYS[1] the batch's claim   KEYS[2] its owner's set of cancels
-- KEYS[3] its task set   KEYS[4] its attempt counts   KEYS[5] its mark
-- KEYS[6] the queue's durable batches   KEYS[7] history   KEYS[8] history index
-- KEYS[9] the owner's published progress
-- ARGV[1] the owner id   ARGV[2] the reason   ARGV[3] most batches kept
-- ARGV[4] oldest kept, ms   ARGV[5] how long an asked cancel waits, ms
-- A key holding foreign data is set aside (set_aside).
-- Returns "asked" (a manager holds it), "cancelled", or "unknown" (Redis
-- has nothing of it).
local owner, id = ARGV[1], ARGV[1] .. ':1'
if redis.call('EXISTS', KEYS[1]) == 1 then
  guarded('SADD', KEYS[2], id)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  return 'asked'
end
local entry = guarded('HGET', KEYS[6], owner)
if not entry and redis.call('EXISTS', KEYS[3]) == 0 then
  return 'unknown'
end
local ttl = redis.call('PTTL', KEYS[3])
if ttl <= 0 then
  ttl = 86400000
end
redis.call('SET', KEYS[5], ARGV[2], 'PX', ttl)
-- The tasks go after this call (rdb.Admin.CancelOwner withdraws them a
-- slice at a time, from every shard): this one does a bounded number of
-- commands however many there are. The set's count and epoch stay: the
-- call that takes the batch over finds its history intact, and fails what
-- it would have submitted.
redis.call('UNLINK', KEYS[4])
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
