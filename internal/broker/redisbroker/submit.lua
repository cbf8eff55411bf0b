-- submit.lua: queue task ids whose payloads the caller has just stored in the
-- manager's task set, then wake idle workers.
-- The payloads are written before the ids are queued (the caller's HSET runs
-- first in the same MULTI), so a worker that pops an id always finds its
-- payload. The task set's field "_" counts the tasks ever
-- submitted to it, and "_e" names its history (an epoch the manager picks;
-- a new one after each recovery). While Redis keeps its data the count only
-- grows and the epoch stays: a lower count than the manager was acknowledged,
-- or another epoch (a set of a history that forked from the manager's, as
-- after a failover with two primaries), tells the manager that Redis lost
-- its writes.
-- KEYS[1] task set of the manager (HASH task id -> payload; "_" -> count;
--         "_e" -> epoch)
-- KEYS[2] list to queue on: the batch's lane (see keys.Lane), or one
--         worker's private list
-- KEYS[3] idle set of the queue
-- KEYS[4] ring of the tasks' priority (a lane is added to it, unless it is
--         there); with a private list, a key that never exists
-- KEYS[5] lanes of the manager (HASH lane -> what its tasks call)
-- KEYS[6] the length of the widest payload in the task set (keys.Widest):
--         raised to this submit's widest (ARGV[9]), so a take or finish
--         knows whether it may read its tasks' payloads with one HMGET
-- KEYS[7] a durable batch's fence (keys.Fence; only with ARGV[11] set)
-- KEYS[8] where fence.lua put aside what the task set held of the ids
--         (keys.Aside; only with ARGV[11] set)
-- ARGV[1] key base "<prefix>:{<queue>}:"
-- ARGV[2] TTL of the manager's keys, ms
-- ARGV[3] the worker id of the private list, or "" for the public list
-- ARGV[4] the count the manager expects at least (0: no check)
-- ARGV[5] the epoch the manager expects; set if the set has none
-- ARGV[6] a new epoch to install (recovery), or ""
-- ARGV[7] the batch's lane ("<manager id>.<lane>"; a private batch's tasks
--         carry one too, for what they call, but queue in KEYS[2])
-- ARGV[8] what the lane's tasks call ("<func>\t<signature>", and
--         "\n<reducer>\t<signature>"): a take passes a lane whose function
--         its worker has not registered with that signature
-- ARGV[9] the length of the widest of the tasks' payloads
-- ARGV[10] the elements of the tasks (the sum of their ids' counts, see
--         size_of), for the lane's count: a submit of thousands of ids
--         parses none of them
-- ARGV[11] the claim a durable batch's owner holds (redisbroker.Fence), or "": the
--         submit is refused if the batch's fence is another claim, and the
--         task set put back as fence.lua found it before the HSET
-- ARGV[12], ARGV[13], ...: the task ids (may be none). Their payloads are not
-- here: the caller stores them in the task set with a plain HSET in the same
-- MULTI, before this script (RDB.Submit), as a payload copied into Lua and
-- out again costs Redis more than a plain command does, several times more
-- for a large one
-- Foreign data in any key here but the task set (a wrong type, a counter
-- that is not a number) is set aside (set_aside) and the submit goes on;
-- tasks it held are found by their manager's audit (audit.lua).
-- Returns {the count after this submit; 1 if the count before it was at
-- least ARGV[4] and the epoch was ARGV[5] (or none), else 0}; the error
-- "FENCED <the fence>" if fenced.
local base, ttl, wid, expect, epoch, fresh = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
if ARGV[11] ~= '' then
  local fence = fence_check(KEYS[7], ARGV[11])
  if fence then
    for i = 12, #ARGV, CHUNK do
      redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
    end
    local aside = guarded('HGETALL', KEYS[8])
    local back, ttl = {}, -2
    for i = 1, #aside, 2 do
      if aside[i] == '_ttl' then
        ttl = tonumber(aside[i + 1])
      else
        back[#back + 1] = aside[i]
        back[#back + 1] = aside[i + 1]
      end
    end
    for i = 1, #back, 2 * CHUNK do
      redis.call('HSET', KEYS[1], unpack(back, i, math.min(i + 2 * CHUNK - 1, #back)))
    end
    if ttl > 0 and #back > 0 then
      redis.call('PEXPIRE', KEYS[1], ttl)
    end
    redis.call('DEL', KEYS[8])
    return redis.error_reply('FENCED ' .. fence)
  end
end
local head = redis.call('HMGET', KEYS[1], '_', '_e')
local before = tonumber(head[1] or '0') or 0
local had = head[2]
local intact = before >= expect and (not had or had == epoch)
-- The ids are ARGV[FIRST..#ARGV], used in place: copying them into a
-- table of their own cost a table write a task.
local FIRST = 12
local nids = #ARGV - FIRST + 1
local widest = tonumber(ARGV[9]) or INLINE + 1
local after = redis.call('HINCRBY', KEYS[1], '_', nids)
if fresh ~= '' then
  redis.call('HSET', KEYS[1], '_e', fresh)
elseif not had then
  redis.call('HSET', KEYS[1], '_e', epoch)
end
redis.call('PEXPIRE', KEYS[1], ttl)
local was = guarded('GET', KEYS[6])
if was and not tonumber(was) then
  widest = INLINE + 1 -- not a length: what the set holds is unknown
end
if nids > 0 and widest > (tonumber(was) or -1) then
  redis.call('SET', KEYS[6], widest == tonumber(ARGV[9]) and ARGV[9] or widest, 'PX', ttl)
else
  redis.call('PEXPIRE', KEYS[6], ttl)
end
if nids == 0 then
  return {after, intact and 1 or 0}
end
local lane = ARGV[7]
if lane ~= '' then
  -- What the lane's tasks call, for a take (and its limit): kept as long
  -- as the task set.
  guarded('HSET', KEYS[5], string.match(lane, '%.(.+)$'), ARGV[8])
  redis.call('PEXPIRE', KEYS[5], ttl)
end
if wid ~= '' then
  lane = '' -- a private batch's tasks queue in the worker's list
end
-- empty: whether the list was empty before this submit (its first push
-- made it as long as that push), as a new batch's lane is
local empty = false
for i = FIRST, #ARGV, CHUNK do
  local last = math.min(i + CHUNK - 1, #ARGV)
  local len = guarded('RPUSH', KEYS[2], unpack(ARGV, i, last))
  if i == FIRST then
    empty = len == last - i + 1
  end
end
if lane ~= '' then
  -- The lane lives as long as the task set, and the keys beside it (see
  -- unlane); its entry in the manager's lanes too. A take drops a lane it
  -- finds empty from the ring. What was beside an empty lane counts
  -- nothing: its count is set, its submit times start again.
  local elements = tonumber(ARGV[10]) and ARGV[10] or '0'
  local first = seq_of(ARGV[FIRST]) or 0
  if empty then
    redis.call('SET', KEYS[2] .. ':e', elements, 'PX', ttl)
    redis.call('DEL', KEYS[2] .. ':t')
  else
    count_elements(KEYS[2], elements)
    redis.call('PEXPIRE', KEYS[2] .. ':e', ttl)
  end
  guarded('ZADD', KEYS[2] .. ':t', first, first .. ':' .. now())
  redis.call('PEXPIRE', KEYS[2] .. ':t', ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  enlist(KEYS[4], lane)
end
if wid == '' then
  for _, w in ipairs(guarded('SPOP', KEYS[3], nids)) do
    ring_worker(base, w)
  end
else
  guarded('SREM', KEYS[3], wid)
  ring_worker(base, wid)
end
return {after, intact and 1 or 0}
