-- backup.lua: queue backup tasks of one manager, and record how its races
-- ended. A backup is a copy of a task that ran long near its batch's end
-- (the manager decides which: manager/backup.go), pushed onto the shard's
-- backup tasks (keys.Backups) with the worker that holds the original, so
-- that no take gives it to that worker; the first result wins at the
-- finish, which the task set fences, and the other is discarded. The task
-- is marked copied in its manager's attempt counts (COPIED), so that the
-- worker whose call lost the race learns it (unwanted.lua).
-- A task is copied only if it is still in its manager's task set and was
-- never lost (no attempt recorded: a suspect, or a task beside a worker
-- that died, may be a poison pill); and only while some worker of the
-- queue is idle (its last take found nothing): a copy is for a free slot,
-- never in the way of waiting work. The idle workers are rung, one a copy.
-- The holder is found among the live workers' held sets: at most BUDGET
-- workers are looked at, and a caller sends at most 8 tasks a call, so a
-- call does at most a few thousand SISMEMBERs.
-- KEYS[1] the shard's backup tasks   KEYS[2] idle set   KEYS[3] workers
-- KEYS[4] the manager's task set   KEYS[5] the manager's lost attempts
-- KEYS[6] the queue's races (keys.Races; on shard 0, else a key never written)
-- ARGV[1] key base "<prefix>:{<queue>}:"   ARGV[2] k, the tasks to copy
-- ARGV[3 .. 2+k] the task ids
-- ARGV[3+k], ...: races that ended: a worker id and "1" if a backup beat
-- it, "0" if it won, per race
-- Returns per task a pair {state, holder}: state "queued", "gone" (no
-- longer in the task set), "lost" (lost before) or "busy" (no worker is
-- idle: nothing was queued), and the worker that holds the original ("" if
-- none of those looked at does).
local base, k = ARGV[1], tonumber(ARGV[2])
for i = 3 + k, #ARGV, 2 do
  local w = ARGV[i]
  guarded('HINCRBY', KEYS[6], w .. '\traces', 1)
  if ARGV[i + 1] == '1' then
    guarded('HINCRBY', KEYS[6], w .. '\tlost', 1)
  end
  redis.call('PEXPIRE', KEYS[6], 86400000)
end
local out = {}
if k == 0 then
  return out
end
if guarded('SCARD', KEYS[2]) == 0 then
  for i = 1, k do
    out[i] = {'busy', ''}
  end
  return out
end
local live = guarded('ZRANGE', KEYS[3], 0, BUDGET - 1)
local queued = 0
for i = 1, k do
  local tid = ARGV[2 + i]
  if unless_foreign('HEXISTS', KEYS[4], tid) ~= 1 then
    out[i] = {'gone', ''}
  elseif guarded('HGET', KEYS[5], tid) then
    out[i] = {'lost', ''}
  else
    local holder = ''
    for j = 1, #live do
      if guarded('SISMEMBER', base .. 'w:' .. live[j] .. ':held', tid) == 1 then
        holder = live[j]
        break
      end
    end
    guarded('RPUSH', KEYS[1], tid .. '\t' .. holder)
    guarded('HSET', KEYS[5], COPIED .. tid, 1)
    redis.call('PEXPIRE', KEYS[5], math.max(redis.call('PTTL', KEYS[4]), 1000))
    queued = queued + 1
    out[i] = {'queued', holder}
  end
end
if queued > 0 then
  redis.call('LTRIM', KEYS[1], -BACKUPS_MAX, -1)
  redis.call('PEXPIRE', KEYS[1], BACKUPS_TTL)
  for _, w in ipairs(guarded('SPOP', KEYS[2], queued)) do
    ring_worker(base, w)
  end
end
return out
