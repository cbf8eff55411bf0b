-- cancel.lua: an operator cancels durable batch owner. The batch is
-- marked cancelled (KEYS[5], the reason: the call that takes it over fails
-- its elements with redmap.ErrCancelled, writes no record, then its keys
-- go) and its attempt counts go; the caller then withdraws its outstanding
-- tasks from every shard (workers skip them), whoever holds the batch, and
-- records it with what ran (redisbroker.Admin.CancelOwner). If a manager
-- holds it (its claim lives), the manager is asked too (its set of
-- cancels, read every Poll: its call ends, and it writes the batch's
-- record); a holder killed before it reads the ask leaves the mark for the
-- next call. If none does, the batch leaves the queue's list of durable
-- batches. A batch none holds whose tasks have all ended (ARGV[3] "1") is
-- left alone: its results wait for the call that takes it over, and
-- cancelling would discard them (the caller passes "0" when the operator
-- asked for that).
-- KEYS[1] the batch's claim   KEYS[2] its owner's set of cancels
-- KEYS[3] its task set   KEYS[4] its attempt counts   KEYS[5] its mark
-- KEYS[6] the queue's durable batches
-- ARGV[1] the owner id   ARGV[2] the reason
-- ARGV[3] "1" if the batch's tasks have all ended (and results would be
-- discarded), else "0"   ARGV[4] how long an asked cancel waits, ms
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
if not held and ARGV[3] == '1' then
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
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return 'asked'
end
redis.call('HDEL', KEYS[6], owner)
return 'cancelled'
